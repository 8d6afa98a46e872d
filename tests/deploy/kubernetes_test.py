"""The Kubernetes manifests (deploy/kubernetes, docs/KUBERNETES.md): every
overlay renders with kubectl's kustomize, every object validates against
its kind's schema, and what matters holds: the restart policies, the grace
arithmetic against the knobs, probes on the HTTP port, the security
context, the Role's verbs, and knobs that exist.

    kubernetes_test.py REPO NODE_MODULES
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

REPO, NODE_MODULES = sys.argv[1], sys.argv[2]
KUBE = os.path.join(REPO, "deploy/kubernetes")
# Kubernetes' own limits of what the cluster autoscaler waits for when it
# drains a node (--max-graceful-termination-sec's default).
CLUSTER_AUTOSCALER_GRACE = 600


def stop_sequence_seconds(step):
    """How long a step after the drain may take, from docs/DESIGN.md's
    stop sequence table, which docgen writes from serve.h (kCallsGrace and
    the others) and generated_docs keeps true."""
    with open(os.path.join(REPO, "docs/DESIGN.md")) as f:
        for row in f:
            if row.startswith(f"| {step}"):
                return float(row.split("|")[2].split()[0])
    raise AssertionError(f"docs/DESIGN.md's stop sequence has no '{step}'")


CALLS_GRACE = stop_sequence_seconds("calls still open")


def words(path):
    """The file's text with each run of white space and comment marks
    one space."""
    with open(os.path.join(REPO, path)) as f:
        return re.sub(r"[\s#]+", " ", f.read())


def seconds(value):
    return f"{value:g}"


def render(overlay):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise AssertionError(
            "kubectl is not on PATH: the manifests need kubectl 1.27+ "
            "(kustomize v5: components, replacements), from "
            "https://kubernetes.io/docs/tasks/tools/ (Debian's "
            "kubernetes-client 1.20 is too old)")
    run = subprocess.run([kubectl, "kustomize", overlay],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise AssertionError(f"kubectl kustomize {overlay}: {run.stderr}")
    out = run.stdout
    return [o for o in yaml.safe_load_all(out) if o]


def knob_variables():
    """The variables of the knob tables docgen writes from the code."""
    names = set()
    for doc in ("docs/CONFIGURATION.md", "docs/TLS.md"):
        with open(os.path.join(REPO, doc)) as f:
            names |= set(re.findall(r"^\| `--[a-z0-9-]+` \| `(CFDB_WORKER_[A-Z0-9_]+)`",
                                    f.read(), re.M))
    return names


def one(objects, kind):
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def pod_spec(objects):
    for o in objects:
        if o["kind"] in ("Job", "Deployment"):
            return o["spec"]["template"]["spec"]
        if o["kind"] == "ScaledJob":
            return o["spec"]["jobTargetRef"]["template"]["spec"]
    raise AssertionError("no workload")


class Overlays(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rendered = {name: render(os.path.join(KUBE, name))
                        for name in ("job", "scaledjob", "deployment")}
        # What scripts/image-test.sh runs with podman kube play.
        cls.rendered["kube-play"] = render(
            os.path.join(REPO, "tests/deploy/kube-play"))
        # The optional admission policy, on top of the deployment.
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "kustomization.yaml"), "w") as f:
                yaml.safe_dump({
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    # kustomize takes relative paths only.
                    "resources": [os.path.relpath(
                        os.path.join(KUBE, "deployment"), d)],
                    "components": [os.path.relpath(
                        os.path.join(KUBE, "components/own-pod-only"), d)],
                }, f)
            cls.rendered["deployment+own-pod-only"] = render(d)

    def test_every_object_validates_against_its_schema(self):
        objects = [o for r in self.rendered.values() for o in r]
        run = subprocess.run(
            ["node", os.path.join(REPO, "tests/deploy/k8s_validate.mjs"),
             NODE_MODULES], input=json.dumps(objects), capture_output=True,
            text=True)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertEqual(run.stdout.count("ok "), len(objects), run.stdout)

    def test_no_pod_template_is_left_and_the_pod_is_the_base_ones(self):
        for name, objects in self.rendered.items():
            with self.subTest(name):
                self.assertNotIn("PodTemplate", [o["kind"] for o in objects])
                spec = pod_spec(objects)
                self.assertEqual(spec["serviceAccountName"], "cfdb-worker")
                self.assertEqual([c["name"] for c in spec["containers"]],
                                 ["worker"])

    def test_one_pod_per_worker_never_restarts(self):
        for name in ("job", "scaledjob"):
            with self.subTest(name):
                objects = self.rendered[name]
                workload = objects[-1] if name == "job" else one(
                    objects, "ScaledJob")["spec"]["jobTargetRef"]
                job = one(objects, "Job")["spec"] if name == "job" else \
                    workload
                self.assertEqual(job["backoffLimit"], 0)
                spec = pod_spec(objects)
                self.assertEqual(spec["restartPolicy"], "Never")
                # It never calls the API: no token, no Role.
                self.assertFalse(spec["automountServiceAccountToken"])
                self.assertNotIn("Role", [o["kind"] for o in objects])
                data = one(objects, "ConfigMap")["data"]
                self.assertGreater(
                    float(data["CFDB_WORKER_IDLE_TIMEOUT_SECONDS"]), 0)
                # A SIGTERM (a node drain) still ends in time.
                drain = (float(data.get("CFDB_WORKER_SIGNAL_GRACE_SECONDS", 0)) +
                         float(data.get("CFDB_WORKER_TASK_KILL_GRACE_SECONDS",
                                        stop_sequence_seconds("cancelled jobs"))) +
                         CALLS_GRACE)
                self.assertGreaterEqual(spec["terminationGracePeriodSeconds"],
                                        drain + 10, "no margin past the drain")

    def test_the_deployment_drains_within_its_grace_and_marks_itself(self):
        objects = self.rendered["deployment"]
        data = one(objects, "ConfigMap")["data"]
        self.assertEqual(data["CFDB_WORKER_IDLE_TIMEOUT_SECONDS"], "0")
        self.assertEqual(data["CFDB_WORKER_K8S_DELETION_COST"], "true")
        self.assertEqual(data["CFDB_WORKER_K8S_SAFE_TO_EVICT"], "true")
        spec = pod_spec(objects)
        self.assertNotIn("restartPolicy", spec)  # Always, a Deployment's
        self.assertTrue(spec["automountServiceAccountToken"])
        drain = (float(data["CFDB_WORKER_SIGNAL_GRACE_SECONDS"]) +
                 float(data["CFDB_WORKER_TASK_KILL_GRACE_SECONDS"]) +
                 CALLS_GRACE)
        grace = spec["terminationGracePeriodSeconds"]
        self.assertGreaterEqual(grace, drain + 10, "no margin past the drain")
        self.assertLessEqual(grace, CLUSTER_AUTOSCALER_GRACE)
        self.assertGreater(float(data["CFDB_WORKER_SIGNAL_GRACE_SECONDS"]), 0)
        # The sum written out for people is this one.
        terms = [data["CFDB_WORKER_SIGNAL_GRACE_SECONDS"],
                 data["CFDB_WORKER_TASK_KILL_GRACE_SECONDS"],
                 seconds(CALLS_GRACE)]
        sum_text = " + ".join(terms) + f" = {seconds(drain)} s"
        self.assertIn(sum_text, words("deploy/kubernetes/deployment/deployment.yaml"))
        self.assertIn(f"{sum_text} of drain in a {grace} s period",
                      words("docs/KUBERNETES.md"))
        self.assertIn(f"then gives calls {seconds(CALLS_GRACE)} s",
                      words("docs/KUBERNETES.md"))

    def test_the_role_allows_get_and_patch_of_pods_only(self):
        objects = self.rendered["deployment"]
        role = one(objects, "Role")
        self.assertEqual(role["rules"], [{"apiGroups": [""],
                                          "resources": ["pods"],
                                          "verbs": ["get", "patch"]}])
        binding = one(objects, "RoleBinding")
        self.assertEqual(binding["roleRef"]["name"], "cfdb-worker")
        self.assertEqual(binding["subjects"],
                         [{"kind": "ServiceAccount", "name": "cfdb-worker"}])
        self.assertFalse(one(self.rendered["job"], "ServiceAccount")
                         ["automountServiceAccountToken"])

    def test_probes_security_resources_and_downward_api(self):
        for name, objects in self.rendered.items():
            with self.subTest(name):
                data = one(objects, "ConfigMap")["data"]
                spec = pod_spec(objects)
                c = spec["containers"][0]
                ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                self.assertEqual(ports["http"],
                                 int(data["CFDB_WORKER_HTTP_PORT"]))
                self.assertEqual(ports["grpc"], int(data["CFDB_WORKER_PORT"]))
                for probe, path in (("startupProbe", "/healthz"),
                                    ("livenessProbe", "/healthz"),
                                    ("readinessProbe", "/readyz")):
                    self.assertEqual(c[probe]["httpGet"],
                                     {"path": path, "port": "http"}, probe)
                self.assertTrue(spec["securityContext"]["runAsNonRoot"])
                self.assertNotEqual(spec["securityContext"]["runAsUser"], 0)
                sc = c["securityContext"]
                self.assertFalse(sc["allowPrivilegeEscalation"])
                self.assertTrue(sc["readOnlyRootFilesystem"])
                self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
                self.assertIn("cpu", c["resources"]["requests"])
                self.assertIn("memory", c["resources"]["requests"])
                env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
                       for e in c["env"]}
                self.assertEqual(env, {"POD_NAME": "metadata.name",
                                       "POD_NAMESPACE": "metadata.namespace"})
                # The TLS files are the Secret's.
                mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
                for key in ("CA", "CERT", "KEY"):
                    self.assertTrue(data[f"CFDB_WORKER_TLS_{key}"].startswith(
                        mounts["tls"] + "/"))

    def test_the_container_runs_the_images_serve(self):
        # Kubernetes' rule: command replaces the image's ENTRYPOINT (and
        # drops its CMD), args replaces CMD. args ["serve"] once made it
        # `cfdb-worker serve serve`, which exits 2 (found by podman kube
        # play in scripts/image-test.sh).
        with open(os.path.join(REPO, "Dockerfile")) as f:
            dockerfile = f.read()
        entrypoint = json.loads(re.findall(r"^ENTRYPOINT (\[.*\])$",
                                           dockerfile, re.M)[-1])
        cmds = re.findall(r"^CMD (\[.*\])$", dockerfile, re.M)
        cmd = json.loads(cmds[-1]) if cmds else []
        for name, objects in self.rendered.items():
            with self.subTest(name):
                c = pod_spec(objects)["containers"][0]
                argv = c.get("command", entrypoint) + c.get(
                    "args", [] if "command" in c else cmd)
                self.assertEqual(argv[:2], ["cfdb-worker", "serve"], argv)
                self.assertTrue(all(a.startswith("--") for a in argv[2:]),
                                argv)

    def test_every_knob_in_the_config_maps_exists(self):
        known = knob_variables()
        self.assertIn("CFDB_WORKER_K8S_DELETION_COST", known)
        for name, objects in self.rendered.items():
            with self.subTest(name):
                data = one(objects, "ConfigMap")["data"]
                self.assertEqual(set(data) - known, set())

    def test_the_admission_policy_binds_the_policy(self):
        objects = self.rendered["deployment+own-pod-only"]
        policy = one(objects, "ValidatingAdmissionPolicy")
        binding = one(objects, "ValidatingAdmissionPolicyBinding")
        self.assertEqual(binding["spec"]["policyName"],
                         policy["metadata"]["name"])
        self.assertEqual(binding["spec"]["validationActions"], ["Deny"])
        rules = policy["spec"]["matchConstraints"]["resourceRules"]
        self.assertEqual(rules[0]["resources"], ["pods"])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
