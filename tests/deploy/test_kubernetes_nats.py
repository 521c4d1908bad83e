"""NATS with JetStream on Kubernetes (deploy/kubernetes/nats, applied as overlays/production/nats), rendered by
the real kustomize: every object validated strictly against the API schemas and passed by checkov; three
servers clustered by route, each with its own claim for the store; a configuration the real nats-server
accepts; the relay's URLs and stream replicas matching the StatefulSet; and the NetworkPolicies of both
steps evaluated together: the relay (and labelled consumers) reach the client port, the servers reach each
other's route port, nothing else does."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from decisionflow_relay.config import nats_servers
from tests.deploy.test_kubernetes import NATS, Pod, _allowed
from tests.support.kubernetes import KUBERNETES, PRODUCTION, parse, render, validate
from tests.support.nats import require_nats_server

pytestmark = pytest.mark.slow

STEP = PRODUCTION / "nats"
BASE = KUBERNETES / "base"
NAMESPACE = "decisionflow"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md"


@pytest.fixture(scope="module")
def nats_yaml(kustomize: str) -> str:
    return render(kustomize, STEP)


@pytest.fixture(scope="module")
def objects(nats_yaml: str) -> list[dict[str, Any]]:
    return parse(nats_yaml)


@pytest.fixture(scope="module")
def base(kustomize: str) -> list[dict[str, Any]]:
    """The services' base, in the namespace the production overlay puts it in (it needs no secret)."""
    found = parse(render(kustomize, BASE))
    for o in found:
        o["metadata"]["namespace"] = NAMESPACE
    return found


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def _config(objects: list[dict[str, Any]]) -> str:
    [config] = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("nats-config")]
    text: str = config["data"]["nats.conf"]
    return text


def test_the_step_renders_in_the_namespace_and_validates_strictly(
    objects: list[dict[str, Any]], nats_yaml: str, tmp_path: Path
) -> None:
    assert sorted(
        (o["kind"], o["metadata"]["name"].rsplit("-", 1)[0] if o["kind"] == "ConfigMap" else "") for o in objects
    ) == [
        ("ConfigMap", "nats-config"),
        ("NetworkPolicy", ""),
        ("PodDisruptionBudget", ""),
        ("Service", ""),
        ("ServiceAccount", ""),
        ("StatefulSet", ""),
    ]
    assert {o["metadata"]["namespace"] for o in objects} == {NAMESPACE}
    file = tmp_path / "nats.yaml"
    file.write_text(nats_yaml)
    for version in ("1.25.0", "1.37.0"):
        checked = validate(file, version)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "kubectl apply -k deploy/kubernetes/overlays/production/nats" in DOCS.read_text()


def test_checkov_finds_no_failed_check_and_every_skip_is_justified(
    objects: list[dict[str, Any]], nats_yaml: str, checkov: str, tmp_path: Path
) -> None:
    file = tmp_path / "checkov" / "nats.yaml"
    file.parent.mkdir()
    file.write_text(nats_yaml)
    argv = [checkov, "-f", str(file), "--framework", "kubernetes", "--skip-download", "-o", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    report = json.loads(done.stdout)
    summary = report["summary"]
    sys.stdout.write(f"checkov {summary['checkov_version']}: {summary}\n")
    failed = [(c["check_id"], c["resource"], c["check_name"]) for c in report["results"]["failed_checks"]]
    assert summary["failed"] == 0 and not failed, failed
    assert summary["parsing_errors"] == 0 and summary["passed"] > 0
    annotations = {
        f"{o['kind']}.{NAMESPACE}.{o['metadata']['name']}": o["metadata"].get("annotations", {}) for o in objects
    }
    for skipped in report["results"]["skipped_checks"]:
        reasons = [v for k, v in annotations[skipped["resource"]].items() if k.startswith("checkov.io/skip")]
        assert any(r.startswith(f"{skipped['check_id']}=") and len(r) > len(skipped["check_id"]) + 20 for r in reasons)


def test_three_servers_cluster_by_route_with_jetstream_on_a_claim_each(objects: list[dict[str, Any]]) -> None:
    statefulset = _one(objects, "StatefulSet", "nats")
    spec = statefulset["spec"]
    replicas = spec["replicas"]
    assert replicas == 3 and spec["podManagementPolicy"] == "Parallel"
    service = _one(objects, "Service", spec["serviceName"])
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    [container] = spec["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    config = _config(objects)
    routes = re.findall(r"nats://([\w.-]+):(\d+)", config.split("cluster {", 1)[1])
    assert routes == [(f"nats-{i}.{service['metadata']['name']}", str(ports["cluster"])) for i in range(replicas)]
    assert re.search(r"^server_name: \$POD_NAME$", config, flags=re.MULTILINE)
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    assert f"listen: 0.0.0.0:{ports['client']}" in config and f"http: 0.0.0.0:{ports['monitor']}" in config
    [store] = re.findall(r"store_dir: (\S+)", config)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    [claim] = spec["volumeClaimTemplates"]
    assert mounts[store] == claim["metadata"]["name"] and claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # A quorum of the three stays up through voluntary disruptions.
    budget = _one(objects, "PodDisruptionBudget", "nats")
    assert budget["spec"]["minAvailable"] == replicas // 2 + 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == "monitor" and container[probe]["httpGet"]["path"].startswith(
            "/healthz"
        )


def test_the_configuration_is_one_nats_server_accepts(objects: list[dict[str, Any]], tmp_path: Path) -> None:
    server = require_nats_server()
    file = tmp_path / "nats.conf"
    file.write_text(_config(objects))
    done = subprocess.run(
        [server, "-t", "-c", str(file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"POD_NAME": "nats-0"},
    )
    assert done.returncode == 0 and "is valid" in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_relay_publishes_to_every_server_with_a_stream_of_as_many_replicas(
    objects: list[dict[str, Any]], base: list[dict[str, Any]]
) -> None:
    statefulset = _one(objects, "StatefulSet", "nats")
    replicas = statefulset["spec"]["replicas"]
    [container] = statefulset["spec"]["template"]["spec"]["containers"]
    client = {p["name"]: p["containerPort"] for p in container["ports"]}["client"]
    relay = _one(base, "Deployment", "relay")
    env = {e["name"]: e.get("value") for e in relay["spec"]["template"]["spec"]["containers"][0]["env"]}
    servers = nats_servers(env["DECISIONFLOW_RELAY_NATS_URL"])
    assert servers == tuple(f"nats://nats-{i}.{statefulset['spec']['serviceName']}:{client}" for i in range(replicas))
    assert int(env["DECISIONFLOW_RELAY_STREAM_REPLICAS"]) == replicas
    # One relay per cursor file: never two pods on the claim, not even during a rollout.
    assert relay["spec"]["replicas"] == 1 and relay["spec"]["strategy"] == {"type": "Recreate"}


RELAY: Pod = (NAMESPACE, {"app.kubernetes.io/name": "decisionflow", "app.kubernetes.io/component": "relay"})
ORCHESTRATOR: Pod = (
    NAMESPACE,
    {"app.kubernetes.io/name": "decisionflow", "app.kubernetes.io/component": "orchestrator"},
)
CONSUMER: Pod = (NAMESPACE, {"decisionflow.io/events-consumer": "true"})
STRANGER: Pod = (NAMESPACE, {"app": "something-else"})
CONSUMER_ELSEWHERE: Pod = ("default", {"decisionflow.io/events-consumer": "true"})
KUBE_DNS: Pod = ("kube-system", {"k8s-app": "kube-dns"})


def _reaches(policies: list[dict[str, Any]], source: Pod, target: Pod, port: int) -> bool:
    return _allowed(policies, "Egress", source, target, port) and _allowed(policies, "Ingress", target, source, port)


def test_only_the_relay_and_labelled_consumers_reach_nats_and_only_nats_its_routes(
    objects: list[dict[str, Any]], base: list[dict[str, Any]]
) -> None:
    policies = [o for o in objects + base if o["kind"] == "NetworkPolicy"]
    callers = {"relay": RELAY, "orchestrator": ORCHESTRATOR, "consumer": CONSUMER, "stranger": STRANGER}
    callers |= {"consumer-elsewhere": CONSUMER_ELSEWHERE, "nats": NATS}
    for port, wanted in ((4222, {"relay", "consumer"}), (6222, {"nats"}), (8222, set())):
        reaching = {name for name, pod in callers.items() if _reaches(policies, pod, NATS, port)}
        assert reaching == wanted, (port, reaching)
    # Out of a NATS pod: DNS and the other servers' routes, nothing else (not the relay, not the orchestrators).
    assert _allowed(policies, "Egress", NATS, KUBE_DNS, 53, "UDP")
    assert not _allowed(policies, "Egress", NATS, ORCHESTRATOR, 50051)
    assert not _allowed(policies, "Egress", NATS, NATS, 4222)
    assert not _allowed(policies, "Egress", NATS, "203.0.113.7", 443)


def test_every_nats_pod_runs_unprivileged_with_a_read_only_root(objects: list[dict[str, Any]]) -> None:
    template = _one(objects, "StatefulSet", "nats")["spec"]["template"]
    spec = template["spec"]
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] >= 10000 and pod["fsGroup"] == pod["runAsGroup"]
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    assert _one(objects, "ServiceAccount", spec["serviceAccountName"])["automountServiceAccountToken"] is False
    [container] = spec["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert set(container["resources"]["limits"]) == set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert all(m["readOnly"] for m in container["volumeMounts"] if m["name"] != "data")
    image = container["image"]
    assert ":" in image and not image.endswith(":latest")
    # The compose file runs the same release.
    compose = yaml.safe_load((Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text())
    assert compose["services"]["nats"]["image"] == image
