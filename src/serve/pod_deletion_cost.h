// Busy-aware Kubernetes scale-in: the worker marks its own pod busy while a
// job is in flight, so that a ReplicaSet scaling down deletes idle pods
// first (controller.kubernetes.io/pod-deletion-cost, Kubernetes 1.22+) and
// Karpenter does not disrupt it (karpenter.sh/do-not-disrupt), and marks it
// idle again after the hold. The calls are ScaleInProtection's (one per
// busy period, on a thread of their own, with backoff); this file is the
// Kubernetes end: one JSON merge patch (RFC 7386) of the pod's annotations,
//   PATCH https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
//         /api/v1/namespaces/NAMESPACE/pods/NAME
// verified against the service account's ca.crt and authenticated with its
// token, as Kubernetes' in-cluster client configuration does.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "cfdb/worker/serve_config.h"
#include "serve/scale_in.h"

namespace cfdb::worker {

// The annotations the worker sets on its pod.
inline constexpr char kPodDeletionCostAnnotation[] =
    "controller.kubernetes.io/pod-deletion-cost";
inline constexpr char kDoNotDisruptAnnotation[] = "karpenter.sh/do-not-disrupt";
inline constexpr char kSafeToEvictAnnotation[] =
    "cluster-autoscaler.kubernetes.io/safe-to-evict";

// FindPod fills `o`'s api_server, pod_name and pod_namespace from `env`
// (KUBERNETES_SERVICE_HOST and _PORT, POD_NAME, POD_NAMESPACE) and, for the
// namespace, the service account's `namespace` file; what is not found
// stays empty.
void FindPod(const EnvLookup& env, PodDeletionCostOptions& o);

// CheckPod returns OK when `o` is off or has all it needs; else
// FAILED_PRECONDITION saying what is missing (not in a pod, no token, no
// pod name).
absl::Status CheckPod(const PodDeletionCostOptions& o);

// KubernetesPodClient patches the pod `o` names. Each call reads the token
// anew (projected tokens rotate); a 401 reads it once more and retries
// before it counts. Its statuses: 2xx OK; 403 PERMISSION_DENIED and 404
// NOT_FOUND (the feature turns off); 401 UNAUTHENTICATED, 409, 429 and 5xx
// UNAVAILABLE (retried), any other INTERNAL; each call bounded by
// `timeout`.
std::unique_ptr<AgentClient> KubernetesPodClient(
    const PodDeletionCostOptions& o, Duration timeout);

}  // namespace cfdb::worker
