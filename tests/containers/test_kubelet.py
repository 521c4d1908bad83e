"""The test's kubelet (tests/containers/kubelet.py) turns a pod template into podman's arguments as a
kubelet would start the pod, including what the production manifests do not use today (args without a
command, an emptyDir, Secret items with their own mode, fieldRef and $(VAR) in env, supplementary
groups), and refuses what it cannot carry over. No container is started here."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.containers.kubelet import Namespace, Workload, cpu, memory, workloads

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the kubelet writes volume files owned by root:fsGroup")

NAMESPACE = "decisionflow"


def _objects() -> list[dict[str, Any]]:
    meta = {"namespace": NAMESPACE}
    return [
        {"kind": "Secret", "metadata": {"name": "s", **meta}, "data": {"a": base64.b64encode(b"A").decode()}},
        {"kind": "ConfigMap", "metadata": {"name": "c", **meta}, "data": {"level": "debug"}},
        {
            "kind": "Service",
            "metadata": {"name": "web-ui", **meta},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 8080, "targetPort": "http"}]},
        },
        {
            "kind": "Deployment",
            "metadata": {"name": "web", **meta},
            "spec": {
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 12,
                        "securityContext": {"runAsUser": 10001, "fsGroup": 10001, "supplementalGroups": [20]},
                        "containers": [
                            {
                                "name": "web",
                                "args": ["--port", "8080"],
                                "ports": [{"name": "http", "containerPort": 8080}],
                                "env": [
                                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                    {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "level"}}},
                                    {"name": "SAID", "value": "$(LEVEL) in $(POD) $$(LEVEL)"},
                                ],
                                "securityContext": {"readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
                                "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}, "requests": {"cpu": "250m"}},
                                "volumeMounts": [
                                    {"name": "secret", "mountPath": "/run/secrets"},
                                    {"name": "scratch", "mountPath": "/tmp"},
                                ],
                            }
                        ],
                        "volumes": [
                            {
                                "name": "secret",
                                "secret": {"secretName": "s", "items": [{"key": "a", "path": "x/a", "mode": 0o400}]},
                            },
                            {"name": "scratch", "emptyDir": {}},
                        ],
                    },
                }
            },
        },
    ]


def _arguments(tmp_path: Path) -> tuple[Workload, list[str]]:
    objects = _objects()
    namespace = Namespace(objects, "IMAGE", tmp_path, "p", {"db": "192.0.2.1"})
    workload = workloads(objects)["web"]
    _, arguments = namespace.podman_run(workload, detach=True)
    return workload, arguments


def _values(arguments: list[str], flag: str) -> list[str]:
    return [arguments[i + 1] for i, a in enumerate(arguments) if a == flag]


def test_a_pod_template_becomes_the_podman_arguments_a_kubelet_would_use(tmp_path: Path) -> None:
    workload, arguments = _arguments(tmp_path)
    assert workload.grace == 12
    # No command: the image's entrypoint stays, args replace its CMD.
    assert "--entrypoint" not in arguments and arguments[-3:] == ["IMAGE", "--port", "8080"]
    env = dict(e.split("=", 1) for e in _values(arguments, "--env"))
    assert env["POD"] == "p-web" and env["LEVEL"] == "debug" and env["SAID"] == "debug in p-web $(LEVEL)"
    # A Service with a cluster IP gets link variables; its names resolve to loopback, the database's to its address.
    assert env["WEB_UI_SERVICE_PORT_HTTP"] == "8080" and env["WEB_UI_PORT"] == "tcp://127.0.0.1:8080"
    hosts = _values(arguments, "--add-host")
    assert {"web-ui:127.0.0.1", "web-ui.decisionflow.svc.cluster.local:127.0.0.1", "db:192.0.2.1"} <= set(hosts)
    assert _values(arguments, "--user") == ["10001:10001"] and _values(arguments, "--group-add") == ["10001", "20"]
    assert {"--read-only", "--read-only-tmpfs=false", "--cap-drop=ALL"} <= set(arguments)
    assert "no-new-privileges" not in _values(arguments, "--security-opt"), (
        "only allowPrivilegeEscalation: false sets it"
    )
    assert (_values(arguments, "--cpus"), _values(arguments, "--memory")) == (["0.5"], [str(64 * 2**20)])
    assert _values(arguments, "--cpu-shares") == ["256"]
    secret, scratch = _values(arguments, "--volume")
    host, inside, mode = secret.split(":")
    assert (inside, mode) == ("/run/secrets", "ro")
    written = Path(host) / "x" / "a"
    assert written.read_bytes() == b"A" and stat.S_IMODE(written.stat().st_mode) == 0o400
    assert (written.stat().st_uid, written.stat().st_gid) == (0, 10001)
    host, inside, mode = scratch.split(":")
    assert (inside, mode) == ("/tmp", "rw") and Path(host).stat().st_gid == 10001


def test_the_kubernetes_quantities() -> None:
    assert (cpu("500m"), cpu("2"), cpu(1)) == (0.5, 2.0, 1.0)
    assert (memory("320Mi"), memory("1Gi"), memory("128M")) == (320 * 2**20, 2**30, 128 * 10**6)


@pytest.mark.parametrize(
    ("where", "feature"),
    [
        ("volumes", {"name": "scratch", "hostPath": {"path": "/"}}),
        ("initContainers", [{"name": "before"}]),
    ],
)
def test_what_it_cannot_carry_over_fails_the_test_by_name(tmp_path: Path, where: str, feature: Any) -> None:
    objects = _objects()
    spec = objects[-1]["spec"]["template"]["spec"]
    if where == "volumes":
        spec["volumes"][1] = feature
    else:
        spec[where] = feature
    namespace = Namespace(objects, "IMAGE", tmp_path, "p")
    with pytest.raises(pytest.fail.Exception, match="not run by the test's kubelet"):
        namespace.podman_run(workloads(objects)["web"], detach=True)
