"""A dispatch racing the worker's own retirement, from both clients: 100
rounds each, fired around the moment a worker retires for idleness (on a
fresh channel and on one already connected). Each call ends within its
deadline, with a documented outcome: the job ran (its acceptance kept the
worker serving) or nothing started (TransientRpcError). With gRPC's
transparent retries on, grpcio 1.51 left about one call in 40 waiting past
its deadline for good here; the client turns them off."""
import threading
import time
import unittest

import cfdb_worker
from support import AsyncClient, BlockingClient, Worker

ROUNDS = 100
IDLE_TIMEOUT = 0.3  # seconds: the worker retires this long after it starts
TIMEOUT = 3.0  # each dispatch's own deadline


class RetirementRace:
    def test_a_dispatch_at_the_moment_the_worker_retires_ends_in_time(self):
        outcomes, late = {}, []
        for i in range(ROUNDS):
            worker = Worker("--idle-timeout-seconds", str(IDLE_TIMEOUT))
            # From before the worker retires to after it: its idle clock
            # starts about when it says it listens.
            at = time.monotonic() + IDLE_TIMEOUT * (0.5 + 0.9 * i / ROUNDS)
            try:
                outcome, took = self.dispatch_at(worker, at, warm=bool(i % 2))
            finally:
                worker.kill()
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            # Past its deadline by more than a loaded machine's lag, short
            # of the join's bound (dispatch_at) that calls it hung.
            if took > TIMEOUT + 3:
                late.append((i, outcome, round(took, 3)))
        self.assertEqual(late, [], "calls that ended past their deadline")
        self.assertLessEqual(set(outcomes), {"ran", "TransientRpcError"},
                             outcomes)
        # Aimed at the moment: some calls came before the worker retired.
        self.assertGreater(outcomes.get("ran", 0), 0, outcomes)

    def dispatch_at(self, worker, at, warm):
        """(outcome, seconds) of a dispatch fired at monotonic time `at`;
        ("hung", ...) for one that has not ended well past its deadline."""
        result = {}
        c = self.open(worker.address)
        if warm:
            c.health()
        time.sleep(max(0.0, at - time.monotonic()))

        def dispatch():
            try:
                ended = c.dispatch(["true"], timeout=TIMEOUT)
                result["outcome"] = "ran" if ended.ok else repr(ended)
            except cfdb_worker.WorkerError as e:
                result["outcome"] = type(e).__name__
        start = time.monotonic()
        call = threading.Thread(target=dispatch, daemon=True)
        call.start()
        call.join(TIMEOUT + 5)
        took = time.monotonic() - start
        if call.is_alive():
            return "hung", took  # closing its channel could hang too
        c.close()
        return result["outcome"], took


class BlockingTest(BlockingClient, RetirementRace, unittest.TestCase):
    pass


class AioTest(AsyncClient, RetirementRace, unittest.TestCase):
    pass


if __name__ == "__main__":
    unittest.main()
