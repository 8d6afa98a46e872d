#!/usr/bin/env python3
"""Turns the rendered pod-per-worker overlay (tests/deploy/kube-play, on
deploy/kubernetes/job) into what Debian's podman 4.3 `kube play` runs, for
scripts/image-test.sh: writes OUT/play.yaml (the ConfigMap and a Pod) and
OUT/secret.yaml (the TLS Secret, for `podman secret create`).

The pod spec is the rendered one; only what podman 4.3 cannot take changes,
each for the reason said:
- the Job becomes a Pod of its template (kube play runs Pods and
  Deployments, not Jobs);
- the containers' ports go, and the probes' named ports become numbers: with
  the host's network (no CNI here) podman refuses port mappings; the ports
  themselves move to free ones, in the ConfigMap, as a test needs;
- POD_NAMESPACE's field reference (metadata.namespace) becomes the value
  "default": podman does not know that field;
- the Secret is a podman secret holding the Secret's YAML, which is how
  podman 4.3 fills a secret volume, its PEMs in `data` as they are, not in
  base64 (podman 4.3 writes each value verbatim and ignores stringData).

The container's image becomes --image, the one under test.

Usage: kube_play.py RENDERED OUT --image IMAGE --grpc-port P --http-port P
--pki DIR (DIR holds scripts/test-pki.sh's ca.pem, worker.pem and
worker.key). Prints what the test needs of the pod, on one line: the
Secret's name, the container's name as podman calls it (POD-CONTAINER),
the pod's UID:GID, and the volumes podman will create (named after the
Secret or the emptyDir).
"""
import argparse
import pathlib
import sys

import yaml


def pod_of(job):
    template = job["spec"]["template"]
    metadata = dict(template.get("metadata", {}))
    metadata["name"] = job["metadata"]["name"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": template["spec"]}


def for_podman(container, image, ports):
    container["image"] = image
    numbers = {p["name"]: ports[p["name"]] for p in container.pop("ports")}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container.get(probe, {}).get("httpGet")
        if get is not None:
            get["port"] = numbers.get(get["port"], get["port"])
    for variable in container.get("env", []):
        field = variable.get("valueFrom", {}).get("fieldRef", {})
        if field.get("fieldPath") == "metadata.namespace":
            del variable["valueFrom"]
            variable["value"] = "default"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("rendered")
    parser.add_argument("out")
    parser.add_argument("--image", required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--pki", required=True)
    options = parser.parse_args()
    ports = {"grpc": options.grpc_port, "http": options.http_port}
    docs = list(yaml.safe_load_all(pathlib.Path(options.rendered).read_text()))
    play, secret_name = [], None
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            doc["data"]["CFDB_WORKER_PORT"] = str(ports["grpc"])
            doc["data"]["CFDB_WORKER_HTTP_PORT"] = str(ports["http"])
            play.append(doc)
        elif doc["kind"] == "Job":
            pod = pod_of(doc)
            for container in pod["spec"]["containers"]:
                for_podman(container, options.image, ports)
            for volume in pod["spec"].get("volumes", []):
                if "secret" in volume:
                    secret_name = volume["secret"]["secretName"]
            play.append(pod)
    if secret_name is None or len(play) != 2:
        sys.exit("kube_play.py: the rendering has no Job with a secret "
                 "volume and its ConfigMap")
    pki = pathlib.Path(options.pki)
    files = {"ca.crt": "ca.pem", "tls.crt": "worker.pem", "tls.key": "worker.key"}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
              "metadata": {"name": secret_name},
              "data": {key: (pki / name).read_text()
                       for key, name in files.items()}}
    out = pathlib.Path(options.out)
    (out / "play.yaml").write_text(yaml.safe_dump_all(play))
    (out / "secret.yaml").write_text(yaml.safe_dump(secret))
    spec, security = pod["spec"], pod["spec"]["securityContext"]
    volumes = [v.get("secret", {}).get("secretName", v["name"])
               for v in spec.get("volumes", [])]
    print(secret_name, f'{pod["metadata"]["name"]}-{spec["containers"][0]["name"]}',
          f'{security["runAsUser"]}:{security["runAsGroup"]}', *volumes)


if __name__ == "__main__":
    main()
