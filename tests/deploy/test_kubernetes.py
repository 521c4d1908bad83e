"""deploy/kubernetes rendered by the real kustomize (4.5.4, what ``kubectl apply -k`` embeds in
kubectl 1.24-1.26) in a copy of the repository whose secrets folder deploy/make-secrets.sh filled as
docs/kubernetes.md says, then checked: against the Kubernetes API schemas (strict), by checkov, and
for least privilege against docker-compose.yml (each workload mounts what its compose service
mounts), the NetworkPolicies evaluated against the pods' labels, the probes, the security contexts,
the settings and the commands."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from decisionflow_cli.review._connection import CONNECTION_SETTINGS
from decisionflow_console.config import SETTINGS as CONSOLE_SETTINGS
from decisionflow_relay.config import SETTINGS as RELAY_SETTINGS
from decisionflow_server.foundation.settings import Setting
from effect_receiver.config import SETTINGS as RECEIVER_SETTINGS
from orchestrator.config import SETTINGS as ORCHESTRATOR_SETTINGS
from reconciler.config import SETTINGS as RECONCILER_SETTINGS
from tests.deploy.made import (
    COMPOSE,
    documented_make_secrets_line,
    environment_without_venv,
    run_documented_line_in_a_copy,
    secret_folders,
    world_traversable_directory,
)
from tests.support.cli import SCRIPTS, command_words, help_text, names_flag
from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.kubernetes import KUBERNETES, PRODUCTION, Rendered, render_production, validate
from tests.support.nats import require_nats_server, start_nats, stream_messages
from tests.support.servers import ServiceProcess

ROOT = Path(__file__).resolve().parents[2]
CONSOLE_COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.console.yml").read_text())
DOCS = ROOT / "docs" / "kubernetes.md"
# The one kustomization that sets the image, a component both production steps include.
RELEASE = PRODUCTION / "release" / "kustomization.yaml"
NAMESPACE = "decisionflow"
SETTINGS_BY_SCRIPT: dict[str, tuple[Setting[Any], ...]] = {
    "decisionflow-receiver": RECEIVER_SETTINGS,
    "decisionflow-orchestrator": ORCHESTRATOR_SETTINGS,
    "decisionflow-reconciler": RECONCILER_SETTINGS,
    "decisionflow-console": CONSOLE_SETTINGS,
    "decisionflow-relay": RELAY_SETTINGS,
    "decisionflow": CONNECTION_SETTINGS,
}
# Each workload and the compose service whose mounts it carries.
COMPOSE_SERVICE = {
    "orchestrator": COMPOSE["services"]["orchestrator-1"],
    "receiver": COMPOSE["services"]["receiver"],
    "reconciler": COMPOSE["services"]["reconciler"],
    "console": CONSOLE_COMPOSE["services"]["console"],
    "audit-monitor": COMPOSE["services"]["audit-monitor"],
    "relay": COMPOSE["services"]["relay"],
}
# The only writable mounts: the audit log's claims (step 1), each where the image has a directory of uid 10001
# (tests/deploy/test_compose.py checks the Dockerfile), mounted by these workloads only.
CLAIMS = {
    "orchestrator": ("audit-publish", "/var/lib/decisionflow/audit-publish", "ReadWriteMany"),
    "audit-monitor": ("audit-monitor", "/var/lib/decisionflow/audit-monitor", "ReadWriteOnce"),
    "relay": ("relay-cursor", "/var/lib/decisionflow/relay", "ReadWriteOnce"),
}
# The one difference: compose gives each orchestrator replica a certificate of its own name; the
# Kubernetes replicas share one Service name and one certificate for it.
SHARED_CERTIFICATE = {"orchestrator-1.pem": "orchestrator.pem", "orchestrator-1.key": "orchestrator.key"}
# And where the credentials file is: compose mounts the folder it is in (a file mounted alone keeps showing the
# one that was there at start-up once `decisionflow token new` replaces it); a Secret volume is one folder
# already, swapped whole by the kubelet when the Secret changes.
COMPOSE_FOLDER_FILES = {"/run/secrets/credentials/credentials.json": "/run/secrets/credentials.json"}
SECRET_MODE = 0o440
UID = 10001

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make the secrets"),
]


def docs_make_secrets_line() -> str:
    """Return docs/kubernetes.md's command line that fills the overlay's secrets folder."""
    return documented_make_secrets_line(DOCS)


@pytest.fixture(scope="module")
def rendered(kustomize: str) -> Iterator[Rendered]:
    """Both production steps rendered in a copy of the repository after the documented make-secrets line."""
    for directory in world_traversable_directory():
        clone = run_documented_line_in_a_copy(directory, docs_make_secrets_line())
        yield render_production(kustomize, clone)


def _workloads(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Return each Deployment, CronJob and Job by name, mapped to its pod template."""
    templates = {}
    for o in objects:
        if o["kind"] in ("Deployment", "Job"):
            templates[o["metadata"]["name"]] = o["spec"]["template"]
        elif o["kind"] == "CronJob":
            templates[o["metadata"]["name"]] = o["spec"]["jobTemplate"]["spec"]["template"]
    return templates


def _all_workloads(rendered: Rendered) -> dict[str, dict[str, Any]]:
    return _workloads(rendered.services) | _workloads(rendered.migrate)


def _container(template: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any]
    [container] = template["spec"]["containers"]
    return container


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


# --- The renders are what the supported Kubernetes takes --------------------------------------------


def test_the_three_steps_render_and_only_the_second_migrates(rendered: Rendered) -> None:
    assert sorted((o["kind"], o["metadata"]["name"]) for o in rendered.common) == [
        ("Namespace", NAMESPACE),
        ("PersistentVolumeClaim", "audit-monitor"),
        ("PersistentVolumeClaim", "audit-publish"),
        ("PersistentVolumeClaim", "relay-cursor"),
        ("Secret", "orchestrator-database"),
        ("Secret", "receiver-database"),
    ]
    assert {o["kind"] for o in rendered.migrate} == {"Job", "ServiceAccount", "NetworkPolicy"}
    migrating = {name for name, t in _all_workloads(rendered).items() if "migrate" in _container(t)["command"]}
    assert migrating == {"orchestrator-migrate", "receiver-migrate"}
    assert not [o for o in rendered.services if o["kind"] == "Job"], "a migration Job in the services' step"
    assert {o["metadata"].get("namespace") for o in rendered.every if o["kind"] != "Namespace"} == {NAMESPACE}
    for template in _all_workloads(rendered).values():
        image = _container(template)["image"]
        assert image == "decisionflow:0.1.0" == COMPOSE["x-decisionflow"]["image"], image


def test_deleting_the_migration_step_deletes_only_the_migration_objects(rendered: Rendered) -> None:
    """`kubectl delete -k` deletes what the step renders: the migration step renders its Jobs, their
    ServiceAccount and NetworkPolicy and nothing else (no Namespace, no Secret the services mount),
    and the services' step no Namespace (deleting it leaves the databases and the Jobs alone)."""
    for o in rendered.migrate:
        assert o["metadata"]["labels"]["app.kubernetes.io/component"] == "migrate", (o["kind"], o["metadata"]["name"])
    assert not {"Namespace", "Secret", "ConfigMap"} & {o["kind"] for o in rendered.migrate}
    assert "Namespace" not in {o["kind"] for o in rendered.services}
    # What the Jobs mount is step 1's, under names that carry no hash, so step 2 names them unrendered.
    mounted = {
        volume["secret"]["secretName"]
        for template in _workloads(rendered.migrate).values()
        for volume in template["spec"]["volumes"]
    }
    assert mounted == {o["metadata"]["name"] for o in rendered.common if o["kind"] == "Secret"}


def test_the_image_is_set_in_one_place_that_both_steps_take_it_from(kustomize: str) -> None:
    """The file docs/kubernetes.md names for the image is the only kustomization that sets one, and an
    image set there is the image of every workload of both steps."""
    setting = sorted(
        str(file.relative_to(KUBERNETES))
        for file in KUBERNETES.rglob("kustomization.yaml")
        if "images" in (yaml.safe_load(file.read_text()) or {})
    )
    assert setting == [str(RELEASE.relative_to(KUBERNETES))]
    docs = DOCS.read_text()
    assert f"`{RELEASE.relative_to(KUBERNETES)}`" in docs
    assert "`overlays/production/kustomization.yaml` and your registry in its `images:`" not in docs
    for directory in world_traversable_directory():
        clone = run_documented_line_in_a_copy(directory, docs_make_secrets_line())
        release = clone / RELEASE.relative_to(ROOT)
        text = release.read_text()
        assert text.count("newName: decisionflow\n") == text.count("newTag: 0.1.0\n") == 1
        release.write_text(
            text.replace("newName: decisionflow\n", "newName: registry.example.com/decisionflow\n").replace(
                "newTag: 0.1.0\n", "newTag: 0.2.0\n"
            )
        )
        again = render_production(kustomize, clone)
        images = {name: _container(t)["image"] for name, t in _all_workloads(again).items()}
        assert set(images) >= {"orchestrator", "receiver", "reconciler", "console", "orchestrator-migrate"}
        assert set(images.values()) == {"registry.example.com/decisionflow:0.2.0"}, images


def test_every_container_runs_a_pinned_tag_pulled_only_when_the_node_lacks_it(rendered: Rendered) -> None:
    """IfNotPresent, so an image loaded into the node by hand (kind load docker-image, minikube image
    load: no registry) runs as shipped; Always would make the kubelet pull a tag no registry holds."""
    for name, template in _all_workloads(rendered).items():
        for container in template["spec"]["containers"]:
            assert container["imagePullPolicy"] == "IfNotPresent", name
            tag = container["image"].rpartition("@")[0] or container["image"]
            assert ":" in tag.rsplit("/", 1)[-1] and not tag.endswith(":latest"), (name, container["image"])


@pytest.mark.parametrize("version", ["1.25.0", "1.37.0"])
def test_every_object_validates_strictly_against_the_api_schemas(rendered: Rendered, version: str) -> None:
    steps = (("common", rendered.common_yaml), ("migrate", rendered.migrate_yaml), ("services", rendered.services_yaml))
    for step, text in steps:
        file = rendered.secrets.parent / f"{step}.yaml"
        file.write_text(text)
        checked = validate(file, version)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_checkov_finds_no_failed_check_and_every_skip_is_justified(rendered: Rendered, checkov: str) -> None:
    folder = rendered.secrets.parent / "checkov"
    folder.mkdir()
    file = folder / "rendered.yaml"
    file.write_text(rendered.common_yaml + "---\n" + rendered.migrate_yaml + "---\n" + rendered.services_yaml)
    done = subprocess.run(
        [checkov, "-f", str(file), "--framework", "kubernetes", "--skip-download", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads(done.stdout)
    summary = report["summary"]
    sys.stdout.write(f"checkov {summary['checkov_version']}: {summary}\n")
    failed = [(c["check_id"], c["resource"], c["check_name"]) for c in report["results"]["failed_checks"]]
    assert summary["failed"] == 0 and not failed, failed
    assert summary["parsing_errors"] == 0 and summary["passed"] > 0
    annotations = {
        f"{o['kind']}.{o['metadata'].get('namespace', 'default')}.{o['metadata']['name']}": o["metadata"].get(
            "annotations", {}
        )
        for o in rendered.every
    }
    for skipped in report["results"]["skipped_checks"]:
        reasons = [v for k, v in annotations[skipped["resource"]].items() if k.startswith("checkov.io/skip")]
        assert any(r.startswith(f"{skipped['check_id']}=") and len(r) > len(skipped["check_id"]) + 20 for r in reasons)


# --- Least privilege: what each workload holds ------------------------------------------------------


def _secret_files(rendered: Rendered, template: dict[str, Any]) -> dict[str, bytes]:
    """Return each file a pod template's volumes put in its container, by mounted path, with its content."""
    objects = {(o["kind"], o["metadata"]["name"]): o for o in rendered.every}
    volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
    files: dict[str, bytes] = {}
    for mount in _container(template).get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "persistentVolumeClaim" in volume:
            continue  # written by the pod, not by the kubelet
        if "secret" in volume:
            source = objects["Secret", volume["secret"]["secretName"]]
            data = {k: base64.b64decode(v) for k, v in source["data"].items()}
        else:
            source = objects["ConfigMap", volume["configMap"]["name"]]
            data = {k: v.encode() for k, v in source["data"].items()}
        items = volume.get("secret", volume.get("configMap", {})).get("items")
        if items:
            data = {item["path"]: data[item["key"]] for item in items}
        files |= {f"{mount['mountPath']}/{key}": content for key, content in data.items()}
    return files


def _compose_files(service: dict[str, Any], compose: dict[str, Any], secrets: Path) -> dict[str, bytes]:
    """Return what a compose service mounts (secrets and configs), by path, read from the made folder."""
    files: dict[str, bytes] = {}
    for entry in service.get("secrets", []):
        source = Path(compose["secrets"][entry["source"]]["file"]).name
        files[f"/run/secrets/{entry['target']}"] = (secrets / SHARED_CERTIFICATE.get(source, source)).read_bytes()
    for entry in service.get("configs", []):
        files[entry["target"]] = (secrets / Path(compose["configs"][entry["source"]]["file"]).name).read_bytes()
    for folder, target in secret_folders(service).items():
        for file in (secrets / Path(folder).name).iterdir():
            path = f"{target}/{file.name}"
            files[COMPOSE_FOLDER_FILES.get(path, path)] = file.read_bytes()
    return files


@pytest.mark.parametrize("name", sorted(COMPOSE_SERVICE))
def test_each_workload_holds_exactly_what_its_compose_service_mounts(rendered: Rendered, name: str) -> None:
    template = _workloads(rendered.services)[name]
    compose = CONSOLE_COMPOSE if name == "console" else COMPOSE
    held = _secret_files(rendered, template)
    wanted = _compose_files(COMPOSE_SERVICE[name], compose, rendered.secrets)
    assert sorted(held) == sorted(wanted)
    for path, content in wanted.items():
        assert held[path] == content, f"{name}: {path} is not the file compose mounts there"


@pytest.mark.parametrize("service", ["orchestrator", "receiver"])
def test_a_migration_job_holds_its_database_url_only(rendered: Rendered, service: str) -> None:
    template = _workloads(rendered.migrate)[f"{service}-migrate"]
    held = _secret_files(rendered, template)
    url = f"/run/secrets/{service}-database.url"
    assert list(held) == [url]
    assert held[url] == (rendered.secrets / f"{service}-database.url").read_bytes()
    assert _env(_container(template)) == {f"DECISIONFLOW_{service.upper()}_DATABASE_URL_FILE": url}


def test_every_mount_is_read_only_and_read_through_the_group(rendered: Rendered) -> None:
    """Every Secret and ConfigMap read-only, through the group; the one writable mount of a workload is its
    audit log claim (CLAIMS), made in step 1 so that deleting the services' step keeps it."""
    claims = {o["metadata"]["name"]: o for o in rendered.common if o["kind"] == "PersistentVolumeClaim"}
    for name, template in _all_workloads(rendered).items():
        container = _container(template)
        claimed = {v["name"]: v for v in template["spec"].get("volumes", []) if "persistentVolumeClaim" in v}
        writable = [m for m in container.get("volumeMounts", []) if m["name"] in claimed]
        if name in CLAIMS:
            claim, path, access = CLAIMS[name]
            [mount] = writable
            assert mount["mountPath"] == path and not mount.get("readOnly"), name
            assert claimed[mount["name"]]["persistentVolumeClaim"] == {"claimName": claim}, name
            assert claims[claim]["spec"]["accessModes"] == [access], claim
        else:
            assert not writable, name
        assert all(m["readOnly"] is True for m in container.get("volumeMounts", []) if m not in writable), name
        for volume in template["spec"].get("volumes", []):
            if "persistentVolumeClaim" in volume:
                continue
            source = volume.get("secret") or volume.get("configMap")
            assert source is not None, f"{name} has a volume that is neither a Secret nor a ConfigMap: {volume}"
            assert source["defaultMode"] == (SECRET_MODE if "secret" in volume else 0o444), (name, volume)
        assert template["spec"]["securityContext"]["fsGroup"] == UID, name


def test_every_pod_runs_unprivileged_with_a_read_only_root_and_bounded_resources(rendered: Rendered) -> None:
    accounts = {o["metadata"]["name"]: o for o in rendered.services + rendered.migrate if o["kind"] == "ServiceAccount"}
    for name, template in _all_workloads(rendered).items():
        spec = template["spec"]
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == pod["runAsGroup"] == UID, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert spec["automountServiceAccountToken"] is False, name
        assert accounts[spec["serviceAccountName"]]["automountServiceAccountToken"] is False
        container = _container(template)
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False, name
        assert security["capabilities"] == {"drop": ["ALL"]}, name
        resources = container["resources"]
        assert set(resources["limits"]) == set(resources["requests"]) == {"cpu", "memory"}, name
    # The image's user is the one the pods name.
    assert "\nUSER 10001:10001\n" in (ROOT / "Dockerfile").read_text()


def test_servers_run_with_migrate_off_one_worker_and_a_grace_that_fits(rendered: Rendered) -> None:
    for name in ("orchestrator", "receiver"):
        template = _workloads(rendered.services)[name]
        env = _env(_container(template))
        prefix = f"DECISIONFLOW_{name.upper()}_"
        assert env[prefix + "MIGRATE"] == "off" and env[prefix + "WORKERS"] == "1", name
        grace = float(env[prefix + "SHUTDOWN_GRACE_SECONDS"])
        pre_stop = _container(template)["lifecycle"]["preStop"]["exec"]["command"]
        assert pre_stop[0] == "sleep"
        assert template["spec"]["terminationGracePeriodSeconds"] > grace + float(pre_stop[1]), name


def test_every_server_has_tls_health_probes_on_its_own_port(rendered: Rendered) -> None:
    for name in ("orchestrator", "receiver"):
        container = _container(_workloads(rendered.services)[name])
        env = _env(container)
        port = env[f"DECISIONFLOW_{name.upper()}_ADDRESS"].rsplit(":", 1)[1]
        ca = "/run/secrets/ca.pem"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            argv = container[probe]["exec"]["command"]
            assert argv[:3] == ["decisionflow", "health", "--target"], (name, probe)
            assert argv[3] == f"localhost:{port}" and argv[argv.index("--ca-file") + 1] == ca, (name, probe)
            assert container[probe]["timeoutSeconds"] < container[probe]["periodSeconds"]
        # The probe's TLS check needs the CA certificate among the pod's files.
        assert ca in _secret_files(rendered, _workloads(rendered.services)[name])
    console = _container(_workloads(rendered.services)["console"])
    http_port = int(_env(console)["DECISIONFLOW_CONSOLE_ADDRESS"].rsplit(":", 1)[1])
    ports = {p["name"]: p["containerPort"] for p in console["ports"]}
    for probe in ("readinessProbe", "livenessProbe"):
        assert console[probe]["httpGet"]["path"] == "/healthz"
        assert ports[console[probe]["httpGet"]["port"]] == http_port


def test_the_reconciler_runs_once_a_pass_never_two_at_once(rendered: Rendered) -> None:
    cronjob = rendered.one("CronJob", "reconciler")
    spec = cronjob["spec"]
    assert spec["concurrencyPolicy"] == "Forbid" and spec["startingDeadlineSeconds"] > 10
    assert spec["successfulJobsHistoryLimit"] >= 1 and spec["failedJobsHistoryLimit"] >= 1
    job = spec["jobTemplate"]["spec"]
    assert job["activeDeadlineSeconds"] > 0 and job["backoffLimit"] == 0
    assert "--once" in _container(job["template"])["command"]


def test_the_replicas_autoscaler_and_disruption_budgets(rendered: Rendered) -> None:
    hpa = rendered.one("HorizontalPodAutoscaler", "orchestrator")
    assert hpa["apiVersion"] == "autoscaling/v2" and hpa["spec"]["minReplicas"] >= 2
    [metric] = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    # The autoscaler owns the orchestrators' count: a count in the Deployment would reset it at each apply.
    assert "replicas" not in rendered.one("Deployment", "orchestrator")["spec"]
    assert rendered.one("Deployment", "console")["spec"]["replicas"] == 1
    for name in ("orchestrator", "receiver"):
        budget = rendered.one("PodDisruptionBudget", name)
        labels = _workloads(rendered.services)[name]["metadata"]["labels"]
        assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


def _cores(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def test_the_receivers_scale_with_the_orchestrators_and_keep_headroom_at_their_bound(rendered: Rendered) -> None:
    """docs/kubernetes.md's figure: a third to a half of a receiver core per orchestrator core. With
    every orchestrator the autoscaler may run at its CPU limit, the receivers it may run hold more
    than half as many cores."""
    assert "a third to a half of a core follows one orchestrator core" in DOCS.read_text()
    hpa = rendered.one("HorizontalPodAutoscaler", "receiver")
    assert hpa["apiVersion"] == "autoscaling/v2" and hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "receiver"}
    [metric] = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    # The autoscaler owns the count: a count in the Deployment would reset it at each apply.
    assert "replicas" not in rendered.one("Deployment", "receiver")["spec"]
    most = {}
    for name in ("orchestrator", "receiver"):
        limit = _container(_workloads(rendered.services)[name])["resources"]["limits"]["cpu"]
        most[name] = rendered.one("HorizontalPodAutoscaler", name)["spec"]["maxReplicas"] * _cores(limit)
    assert most["receiver"] > most["orchestrator"] / 2, most


@pytest.mark.parametrize("name", sorted(COMPOSE_SERVICE))
def test_every_variable_is_one_the_service_reads(rendered: Rendered, name: str) -> None:
    container = _container(_workloads(rendered.services)[name])
    known = {s.env for s in SETTINGS_BY_SCRIPT[container["command"][0]] if not s.flag_only}
    unknown = sorted(set(_env(container)) - known)
    assert not unknown, f"{name} sets variables its configuration does not read: {unknown}"
    assert "envFrom" not in container, "every variable is named"


def test_every_command_and_flag_exists(rendered: Rendered) -> None:
    argvs = []
    for template in _all_workloads(rendered).values():
        container = _container(template)
        argvs.append(container["command"])
        argvs += [
            container[p]["exec"]["command"]
            for p in ("startupProbe", "readinessProbe", "livenessProbe")
            if "exec" in container.get(p, {})
        ]
    checked: dict[tuple[str, ...], str] = {}
    for argv in argvs:
        if argv[0] == "sleep":
            continue
        assert argv[0] in SCRIPTS, f"{argv[0]} is not a console script of the project"
        words = tuple(command_words(argv))
        usage = checked.setdefault(words, help_text(list(words)))
        for flag in (arg.split("=")[0] for arg in argv if arg.startswith("--")):
            assert names_flag(usage, flag), (argv, flag)


def test_every_server_certificate_names_the_service_its_callers_dial(rendered: Rendered) -> None:
    """Every *_TARGET host (and its namespace-qualified names) verifies against the CA with the
    certificate the pods behind that Service present."""
    served = {
        name: _secret_files(rendered, _workloads(rendered.services)[name]) for name in ("orchestrator", "receiver")
    }
    targets = {
        value.rsplit(":", 1)[0]
        for template in _workloads(rendered.services).values()
        for key, value in _env(_container(template)).items()
        if key.endswith("_TARGET")
    }
    assert targets == {"orchestrator", "receiver"}
    folder = rendered.secrets.parent / "verify"
    folder.mkdir()
    for host in sorted(targets):
        (folder / "server.pem").write_bytes(served[host]["/run/secrets/server.pem"])
        (folder / "ca.pem").write_bytes(served[host]["/run/secrets/ca.pem"])
        for name in (host, f"{host}.{NAMESPACE}.svc", f"{host}.{NAMESPACE}.svc.cluster.local", "localhost"):
            argv = ["openssl", "verify", "-CAfile", "ca.pem", "-purpose", "sslserver", "-verify_hostname", name]
            done = subprocess.run([*argv, "server.pem"], cwd=folder, capture_output=True, text=True, check=False)
            assert done.returncode == 0, (host, name, done.stdout, done.stderr)
        other = "receiver" if host == "orchestrator" else "orchestrator"
        argv = ["openssl", "verify", "-CAfile", "ca.pem", "-verify_hostname", other, "server.pem"]
        assert subprocess.run(argv, cwd=folder, capture_output=True, check=False).returncode != 0


def test_the_pods_are_scraped_on_their_metrics_port(rendered: Rendered) -> None:
    for name in ("orchestrator", "receiver", "relay"):
        template = _workloads(rendered.services)[name]
        annotations = template["metadata"]["annotations"]
        env = _env(_container(template))
        ports = {p["name"]: p["containerPort"] for p in _container(template)["ports"]}
        assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"
        assert annotations["prometheus.io/port"] == env[f"DECISIONFLOW_{name.upper()}_METRICS_PORT"]
        assert int(annotations["prometheus.io/port"]) == ports["metrics"]
    rules = rendered.one("ConfigMap", "decisionflow-alert-rules")
    assert yaml.safe_load(rules["data"]["alerts.yml"])["groups"], "no alert rules"


@pytest.mark.parametrize(("name", "count"), [("reconciler", 4), ("audit-monitor", 1)])
def test_the_cronjob_rules_name_the_rendered_namespace_and_cronjob(rendered: Rendered, name: str, count: int) -> None:
    """The alert rules the ConfigMap ships read kube-state-metrics' series of the CronJobs this render
    makes, in the namespace it makes them in (a rule naming another would never fire)."""
    rules = yaml.safe_load(rendered.one("ConfigMap", "decisionflow-alert-rules")["data"]["alerts.yml"])
    [group] = [g for g in rules["groups"] if g["name"] == "decisionflow-kubernetes"]
    cronjob = rendered.one("CronJob", name)
    prefix = "DecisionflowReconciler" if name == "reconciler" else "DecisionflowAuditMonitor"
    expressions = [rule["expr"] for rule in group["rules"] if rule["alert"].startswith(prefix)]
    assert len(expressions) == count and all("kube_" in e for e in expressions)
    assert len(group["rules"]) == 5, "the reconciler's four and the audit monitor's one"
    for expr in expressions:
        for selector in re.findall(r"kube_\w+\{([^}]*)\}", expr):
            matchers = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', selector))
            assert matchers["namespace"] == cronjob["metadata"]["namespace"], expr
            named = {matchers.get("cronjob"), matchers.get("owner_name")} - {None}
            assert named <= {cronjob["metadata"]["name"]}, expr
    assert {m for e in expressions for m in re.findall(r'owner_kind="(\w+)"', e)} == {"CronJob"}
    # The Jobs the CronJob makes are the ones its alert tells to read the logs of.
    labels = cronjob["spec"]["jobTemplate"]["metadata"]["labels"]
    [failed] = [rule for rule in group["rules"] if rule["alert"] == f"{prefix}JobFailed"]
    selector = f"app.kubernetes.io/component={labels['app.kubernetes.io/component']}"
    assert selector in failed["annotations"]["description"]


# --- NetworkPolicies, evaluated against the pods' labels --------------------------------------------

Pod = tuple[str, dict[str, str]]  # namespace, labels
PROMETHEUS: Pod = ("monitoring", {"app.kubernetes.io/name": "prometheus"})
INGRESS: Pod = ("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"})
CLIENT: Pod = (NAMESPACE, {"decisionflow.io/client": "true"})
STRANGER: Pod = (NAMESPACE, {"app": "something-else"})
CLIENT_ELSEWHERE: Pod = ("default", {"decisionflow.io/client": "true"})
OUTSIDERS = {"prometheus": PROMETHEUS, "ingress": INGRESS, "client": CLIENT, "stranger": STRANGER}
OUTSIDERS["client-elsewhere"] = CLIENT_ELSEWHERE


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"only matchLabels is evaluated here: {selector}"
    wanted: dict[str, str] = selector.get("matchLabels", {})
    return wanted.items() <= labels.items()


def _peer(peer: dict[str, Any], policy_namespace: str, other: Pod | str) -> bool:
    """Whether a policy peer selects other: a pod (by its namespace's and its own labels) or an IP
    address beyond the cluster's pods (by an ipBlock)."""
    if isinstance(other, str):
        block = peer.get("ipBlock")
        if block is None:
            return False
        address = ipaddress.ip_address(other)
        inside = address in ipaddress.ip_network(block["cidr"])
        return inside and not any(address in ipaddress.ip_network(e) for e in block.get("except", []))
    if "ipBlock" in peer:
        return False
    namespace, labels = other
    if "namespaceSelector" in peer:
        in_namespace = _matches(peer["namespaceSelector"], {"kubernetes.io/metadata.name": namespace})
    else:
        in_namespace = namespace == policy_namespace
    return in_namespace and _matches(peer.get("podSelector", {}), labels)


def _port(rule: dict[str, Any], port: int, protocol: str = "TCP") -> bool:
    return "ports" not in rule or any(p["port"] == port and p.get("protocol", "TCP") == protocol for p in rule["ports"])


def _allowed(
    policies: list[dict[str, Any]], direction: str, subject: Pod, other: Pod | str, port: int, protocol: str = "TCP"
) -> bool:
    """Whether the policies selecting subject let traffic on port flow from other (Ingress) or to it (Egress)."""
    namespace, labels = subject
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == namespace
        and _matches(p["spec"]["podSelector"], labels)
        and direction in p["spec"]["policyTypes"]
    ]
    if not selecting:
        return True  # not isolated in this direction
    key, peers = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    return any(
        _port(rule, port, protocol) and (peers not in rule or any(_peer(q, namespace, other) for q in rule[peers]))
        for policy in selecting
        for rule in policy["spec"].get(key, [])
    )


def _reaches(policies: list[dict[str, Any]], source: Pod, target: Pod, port: int) -> bool:
    return _allowed(policies, "Egress", source, target, port) and _allowed(policies, "Ingress", target, source, port)


def _pods(rendered: Rendered) -> dict[str, Pod]:
    pods = {name: (NAMESPACE, t["metadata"]["labels"]) for name, t in _all_workloads(rendered).items()}
    return pods | OUTSIDERS


def _callers(rendered: Rendered, target: str, port_name: str) -> set[str]:
    policies = [o for o in rendered.services + rendered.migrate if o["kind"] == "NetworkPolicy"]
    template = _workloads(rendered.services)[target]
    ports = {p["name"]: p["containerPort"] for p in _container(template)["ports"]}
    pods = _pods(rendered)
    return {
        name for name, pod in pods.items() if name != target and _reaches(policies, pod, pods[target], ports[port_name])
    }


def test_only_the_orchestrators_and_the_reconciler_reach_the_receiver(rendered: Rendered) -> None:
    assert _callers(rendered, "receiver", "grpc") == {"orchestrator", "reconciler"}


def test_only_callers_the_console_the_reconciler_the_audit_monitor_and_the_relay_reach_the_orchestrator(
    rendered: Rendered,
) -> None:
    assert _callers(rendered, "orchestrator", "grpc") == {"client", "console", "reconciler", "audit-monitor", "relay"}


@pytest.mark.parametrize("target", ["orchestrator", "receiver", "relay"])
def test_only_prometheus_reaches_the_metrics_and_the_audit_monitor_the_published_checkpoint(
    rendered: Rendered, target: str
) -> None:
    assert _callers(rendered, target, "metrics") == (
        {"prometheus", "audit-monitor"} if target == "orchestrator" else {"prometheus"}
    )


def test_the_audit_monitor_checks_what_the_orchestrators_publish_once_a_minute(rendered: Rendered) -> None:
    """The orchestrators publish to their claim and serve it on their metrics port; the monitor's CronJob
    fetches it there through the orchestrator Service's name, with compose's command less --every: one
    check per Job, never two at once, a failure reported, not retried."""
    orchestrator = _container(_workloads(rendered.services)["orchestrator"])
    env = _env(orchestrator)
    assert env["DECISIONFLOW_AUDIT_PUBLISH_DIR"] == CLAIMS["orchestrator"][1]
    cronjob = rendered.one("CronJob", "audit-monitor")
    spec = cronjob["spec"]
    assert spec["concurrencyPolicy"] == "Forbid" and spec["schedule"] == "* * * * *"
    assert spec["jobTemplate"]["spec"]["backoffLimit"] == 0 and spec["jobTemplate"]["spec"]["activeDeadlineSeconds"] > 0
    command = _container(spec["jobTemplate"]["spec"]["template"])["command"]
    composed = COMPOSE["services"]["audit-monitor"]["command"]
    every = composed.index("--every")
    assert command == composed[:every] + composed[every + 2 :]
    ports = {p["name"]: p["containerPort"] for p in orchestrator["ports"]}
    assert f"http://orchestrator:{ports['metrics']}/checkpoint" in command
    assert f"orchestrator:{ports['grpc']}" in command
    [service] = [o for o in rendered.services if o["kind"] == "Service" and o["metadata"]["name"] == "orchestrator"]
    assert service["spec"]["clusterIP"] == "None", "headless: the name resolves to the pods, any port of theirs"
    assert Path(command[command.index("--state") + 1]).parent == Path(CLAIMS["audit-monitor"][1])


def test_only_the_ingress_reaches_the_console(rendered: Rendered) -> None:
    assert _callers(rendered, "console", "http") == {"ingress"}


KUBE_DNS: Pod = ("kube-system", {"k8s-app": "kube-dns"})
NODE_LOCAL_DNS = "169.254.20.10"
OUTSIDE = "203.0.113.7"  # an address beyond the cluster's pods: a managed database, a provider, a collector
ELSEWHERE: Pod = ("elsewhere", {"app": "something"})
KEYCLOAK: Pod = ("keycloak", {"app.kubernetes.io/name": "keycloak"})
PGBOUNCER: Pod = (NAMESPACE, {"app.kubernetes.io/name": "pgbouncer"})
# The NATS servers of deploy/kubernetes/nats (a StatefulSet, its own step), by their pods' labels.
NATS: Pod = (NAMESPACE, {"app.kubernetes.io/name": "nats", "app.kubernetes.io/part-of": "decisionflow"})
# Where a pod might send: each destination, and each port and protocol, tried from every workload.
DESTINATIONS = ("kube-dns", "nodelocal-dns", "outside", "elsewhere", "orchestrator", "receiver", "console", "nats")
PROBED_PORTS = (
    (53, "UDP"),
    (53, "TCP"),
    *((port, "TCP") for port in (80, 443, 4222, 4317, 5432, 6222, 6432, 8080, 8222, 8443, 9100, 50051, 50061)),
)


def _destination(pods: dict[str, Pod], name: str) -> Pod | str:
    fixed: dict[str, Pod | str] = {
        "kube-dns": KUBE_DNS,
        "nodelocal-dns": NODE_LOCAL_DNS,
        "outside": OUTSIDE,
        "elsewhere": ELSEWHERE,
        "nats": NATS,
    }
    return fixed[name] if name in fixed else pods[name]


Egress = set[tuple[str, str, int, str]]  # workload, destination, port, protocol


def _egress(policies: list[dict[str, Any]], pods: dict[str, Pod], workloads: list[str]) -> Egress:
    """Every (workload, destination, port, protocol) of the probes that the policies let out of the pod."""
    return {
        (name, destination, port, protocol)
        for name in workloads
        for destination in DESTINATIONS
        for port, protocol in PROBED_PORTS
        if _allowed(policies, "Egress", pods[name], _destination(pods, destination), port, protocol)
    }


def _documented_egress(workloads: list[str]) -> Egress:
    """The same set, as docs/kubernetes.md's table of what each pod may reach declares it."""
    section = DOCS.read_text().split("## Network policies", 1)[1].split("\n## ", 1)[0]
    table = section.split("| from | to | port | why |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1:-1] for line in table.strip().splitlines()[1:]]
    assert rows, "no row in the egress table"
    declared: Egress = set()
    for source, cell, ports, _why in rows:
        sources: list[str] = []
        for word in source.strip().split(", "):
            if word == "every decisionflow pod":
                sources += workloads
            elif word == "migration Jobs":
                sources += ["orchestrator-migrate", "receiver-migrate"]
            else:
                assert word in workloads, word
                sources.append(word)
        target = cell.strip()
        if target.startswith("kube-dns "):
            targets = ["kube-dns"]
        elif target.startswith("NodeLocal DNSCache ") and f"`{NODE_LOCAL_DNS}`" in target:
            targets = ["nodelocal-dns"]
        elif target == "any address":
            targets = list(DESTINATIONS)
        else:
            assert target.endswith(" pods") and target[: -len(" pods")] in [*workloads, "nats"], target
            targets = [target[: -len(" pods")]]
        for entry in ports.strip().split(", "):
            port, _, protocol = entry.partition(" ")
            declared |= {(s, t, int(port), protocol or "TCP") for s in sources for t in targets}
    return declared


def test_every_decisionflow_pod_reaches_out_only_where_the_docs_say(rendered: Rendered) -> None:
    """Egress, evaluated from every workload to DNS (kube-dns and NodeLocal DNSCache), an address beyond
    the cluster, a pod elsewhere and the peers, on every port a pod of ours or of a site might use:
    exactly docs/kubernetes.md's table."""
    policies = [o for o in rendered.services + rendered.migrate if o["kind"] == "NetworkPolicy"]
    pods = _pods(rendered)
    workloads = sorted(_all_workloads(rendered))
    allowed = _egress(policies, pods, workloads)
    assert allowed == _documented_egress(workloads)
    # What the issue found blocked: traces to a collector, and the node's DNS cache.
    for name in ("orchestrator", "receiver"):
        assert (name, "outside", 4317, "TCP") in allowed
    for name in workloads:
        assert (name, "nodelocal-dns", 53, "UDP") in allowed and (name, "kube-dns", 53, "UDP") in allowed
    # The migration step alone (applied before the services' policies exist) lets its Jobs resolve names.
    alone = [o for o in rendered.migrate if o["kind"] == "NetworkPolicy"]
    for job in ("orchestrator-migrate", "receiver-migrate"):
        assert _egress(alone, pods, [job]) == {e for e in allowed if e[0] == job}


def test_a_site_component_opens_its_provider_and_pooler_to_the_pods_that_need_them(
    kustomize: str, rendered: Rendered
) -> None:
    """deploy/kubernetes/components/site-egress, listed in both steps as docs/kubernetes.md shows, opens
    an in-cluster provider on 8443 to the orchestrators and the console and a pooler on 6432 to what
    opens database connections, and nothing else; without it neither is reachable."""
    docs = DOCS.read_text()
    lines = {"services": "  - ../../components/site-egress\n", "migrate": "  - ../../../components/site-egress\n"}
    assert all(line in docs for line in lines.values())
    for directory in world_traversable_directory():
        clone = run_documented_line_in_a_copy(directory, docs_make_secrets_line())
        for step, overlay in (("services", PRODUCTION), ("migrate", PRODUCTION / "migrate")):
            file = clone / overlay.relative_to(ROOT) / "kustomization.yaml"
            text = file.read_text()
            assert text.count("\ncomponents:\n") == 1
            file.write_text(text.replace("\ncomponents:\n", "\ncomponents:\n" + lines[step]))
        opened = render_production(kustomize, clone)
    workloads = sorted(_all_workloads(rendered))
    pods = _pods(rendered)

    def reaching(render: Rendered, target: Pod, port: int) -> set[str]:
        policies = [o for o in render.services + render.migrate if o["kind"] == "NetworkPolicy"]
        return {name for name in workloads if _allowed(policies, "Egress", pods[name], target, port)}

    assert reaching(rendered, KEYCLOAK, 8443) == reaching(rendered, PGBOUNCER, 6432) == set()
    assert reaching(opened, KEYCLOAK, 8443) == {"orchestrator", "console"}
    assert reaching(opened, PGBOUNCER, 6432) == {"orchestrator", "receiver", "orchestrator-migrate", "receiver-migrate"}
    before = _egress([o for o in rendered.services + rendered.migrate if o["kind"] == "NetworkPolicy"], pods, workloads)
    after = _egress([o for o in opened.services + opened.migrate if o["kind"] == "NetworkPolicy"], pods, workloads)
    assert after == before, "the component opened more than its two rules"
    assert {o["metadata"]["labels"]["app.kubernetes.io/component"] for o in opened.migrate} == {"migrate"}


# --- The pods' own environment and files, run as the pods' user ------------------------------------


# The paths inside a pod that are its files here: Secrets, ConfigMaps and claims.
MAPPED = ("/run/", "/etc/", "/var/lib/decisionflow/")


class _Pod:
    """One pod of the render, run here: its Secret and ConfigMap files written as the kubelet writes
    them (owner root, group fsGroup, the volume's mode), its environment with those paths mapped onto
    them, its processes run as its uid and gid with fsGroup as supplementary group."""

    def __init__(self, rendered: Rendered, name: str, root: Path) -> None:
        self.template = _all_workloads(rendered)[name]
        self.container = _container(self.template)
        self.root = root / name
        self.root.mkdir(mode=0o755)
        volumes = {v["name"]: v for v in self.template["spec"].get("volumes", [])}
        group = self.template["spec"]["securityContext"]["fsGroup"]
        for path, content in _secret_files(rendered, self.template).items():
            file = Path(self.local(path))
            for directory in reversed(file.relative_to(self.root).parents[:-1]):
                (self.root / directory).mkdir(exist_ok=True)
                os.chown(self.root / directory, 0, group)
                (self.root / directory).chmod(0o750)
            file.write_bytes(content)
            mount = next(m for m in self.container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
            source = volumes[mount["name"]]
            os.chown(file, 0, group)
            file.chmod((source.get("secret") or source["configMap"])["defaultMode"])
        config_maps = {o["metadata"]["name"]: o["data"] for o in rendered.services if o["kind"] == "ConfigMap"}
        self.env: dict[str, str] = {}
        for entry in self.container.get("env", []):
            if "valueFrom" in entry:
                reference = entry["valueFrom"]["configMapKeyRef"]
                value = config_maps[reference["name"]][reference["key"]]
            else:
                value = entry["value"]
            self.env[entry["name"]] = self.local(value) if value.startswith(MAPPED) else value
        # A claim as a provisioner with fsGroup support gives it: a directory of root and fsGroup, setgid.
        for mount in self.container.get("volumeMounts", []):
            if "persistentVolumeClaim" in volumes[mount["name"]]:
                claim = Path(self.local(mount["mountPath"]))
                claim.mkdir(parents=True)
                os.chown(claim, 0, group)
                claim.chmod(0o2775)
        security = self.template["spec"]["securityContext"]
        self.user = [
            "setpriv",
            "--reuid",
            str(security["runAsUser"]),
            "--regid",
            str(security["runAsGroup"]),
            "--groups",
            str(group),
        ]

    def local(self, path: str) -> str:
        """Return where a path inside the pod is here."""
        return str(self.root / path.lstrip("/"))

    def argv(self, argv: list[str]) -> list[str]:
        """Return a command of the pod as run here: its user, the project's script, its paths mapped."""
        mapped = [self.local(a) if a.startswith(MAPPED) else a for a in argv]
        return [*self.user, str(Path(sys.executable).with_name(mapped[0])), *mapped[1:]]

    def run(self, argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
        """Run one command of the pod to its end."""
        environment = {**_bare_environment(), **self.env, **env}
        return subprocess.run(
            self.argv(argv), capture_output=True, text=True, timeout=60, check=False, env=environment, cwd=self.root
        )

    def start(self, runs: Path, **env: str) -> ServiceProcess:
        """Start the pod's server (on a free port: its address's port replaced by 0) and wait for its port."""
        port_file = runs / f"{self.root.name}.port"
        stderr = runs / f"{self.root.name}.stderr"
        environment = {**_bare_environment(), **self.env, **env}
        with stderr.open("wb") as err:
            process = subprocess.Popen(
                self.argv([*self.container["command"], "--port-file", str(port_file)]),
                stdout=subprocess.DEVNULL,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=environment,
                cwd=self.root,
            )
        server = ServiceProcess(self.root.name, process, 0, stderr, port_file)
        server.wait_ready(60)
        return server

    def probe(self, kind: str, port: int) -> subprocess.CompletedProcess[str]:
        """Run the pod's exec probe of kind against the server's port."""
        argv = [
            a.replace(":50051", f":{port}").replace(":50061", f":{port}")
            for a in self.container[kind]["exec"]["command"]
        ]
        return self.run(argv)


def _bare_environment() -> dict[str, str]:
    return {k: v for k, v in environment_without_venv().items() if k in ("PATH", "LANG", "LC_ALL", "TZ")}


def _as_url_file(pod: _Pod, variable: str, url: str) -> None:
    # The pod's database URL names its database host (postgres:5432); here, the test's database.
    Path(pod.env[variable]).write_text(url + "\n")


def _why_the_pods_user_cannot_run_this_checkout() -> str | None:
    """Why uid 10001 cannot run this environment's scripts (the pods' commands run as it), or None."""
    script = Path(sys.executable).with_name("decisionflow-receiver")
    user = ["setpriv", "--reuid", str(UID), "--regid", str(UID), "--groups", str(UID)]
    done = subprocess.run(
        [*user, str(script), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_bare_environment(),
        cwd="/",
    )
    if done.returncode == 0:
        return None
    return (
        f"uid {UID} cannot run {script} (exit {done.returncode}: {done.stderr.strip()[-300:]}): the checkout and "
        "its .venv must be readable, and every directory above them searchable, by other users"
    )


@pytest.mark.postgres
@pytest.mark.skipif(
    shutil.which("setpriv") is None or os.geteuid() != 0,
    reason="running as the pods' user (uid 10001) needs root and setpriv",
)
def test_the_pods_environment_and_files_run_the_topology_as_their_user(rendered: Rendered) -> None:
    """The migration Jobs, the receiver, the orchestrator, the reconciler's pass, the console and the relay,
    each given only its own environment and files as the kubelet writes them and run as uid 10001: the
    servers refuse an unmigrated schema, the Jobs migrate, the probes pass over TLS, one approval
    commits, the reconciler's pass succeeds, the console answers its probe, and the relay publishes the
    log's events into a NATS cluster of three (nats-server processes here) and stores its cursor on its
    claim."""
    require_nats_server()
    unable = _why_the_pods_user_cannot_run_this_checkout()
    if unable is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{unable}; required here (CI=true)")
        pytest.skip(unable)
    databases = {service: create_postgres_database() for service in ("orchestrator", "receiver")}
    servers: list[ServiceProcess] = []
    for directory in world_traversable_directory():
        try:
            runs = directory / "runs"
            runs.mkdir()
            os.chown(runs, UID, UID)
            pods = {name: _Pod(rendered, name, directory) for name in _all_workloads(rendered)}
            for service, url in databases.items():
                variable = f"DECISIONFLOW_{service.upper()}_DATABASE_URL_FILE"
                _as_url_file(pods[service], variable, url)
                _as_url_file(pods[f"{service}-migrate"], variable, url)
            free = {"DECISIONFLOW_ORCHESTRATOR_ADDRESS": "127.0.0.1:0", "DECISIONFLOW_ORCHESTRATOR_METRICS_PORT": "0"}
            receiver_free = {"DECISIONFLOW_RECEIVER_ADDRESS": "127.0.0.1:0", "DECISIONFLOW_RECEIVER_METRICS_PORT": "0"}

            # Before its Job ran, a server refuses the empty schema.
            refused = pods["receiver"].run(pods["receiver"].container["command"], **receiver_free)
            assert refused.returncode == 2 and "migrate" in refused.stderr, refused.stderr
            for job in ("receiver-migrate", "orchestrator-migrate"):
                migrated = pods[job].run(pods[job].container["command"])
                assert migrated.returncode == 0, (job, migrated.stderr)

            receiver = pods["receiver"].start(runs, **receiver_free)
            servers.append(receiver)
            orchestrator = pods["orchestrator"].start(
                runs, **free, DECISIONFLOW_RECEIVER_TARGET=f"localhost:{receiver.port}"
            )
            servers.append(orchestrator)
            for name, server in (("receiver", receiver), ("orchestrator", orchestrator)):
                for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                    probed = pods[name].probe(kind, server.port)
                    assert probed.returncode == 0 and probed.stdout.strip() == "SERVING", (name, kind, probed.stderr)

            _approve_once(rendered.secrets, orchestrator.port, directory)
            _relay_publishes_the_log(pods["relay"], orchestrator.port, directory)

            reconciler = pods["reconciler"]
            passed = reconciler.run(
                reconciler.container["command"],
                DECISIONFLOW_ORCHESTRATOR_TARGET=f"localhost:{orchestrator.port}",
                DECISIONFLOW_RECEIVER_TARGET=f"localhost:{receiver.port}",
            )
            assert passed.returncode == 0, passed.stderr
            summary = json.loads(passed.stdout.splitlines()[-1])
            assert summary["completed"] is True and summary["still_unknown"] == summary["lookup_failures"] == 0

            console = pods["console"]
            # What docs/kubernetes.md asks: the provider's client secret written into its file first.
            client_secret = Path(console.env["DECISIONFLOW_CONSOLE_OIDC_CLIENT_SECRET_FILE"])
            client_secret.write_text("issued-by-the-provider\n")
            served = console.start(
                runs,
                DECISIONFLOW_CONSOLE_ADDRESS="127.0.0.1:0",
                DECISIONFLOW_ORCHESTRATOR_TARGET=f"localhost:{orchestrator.port}",
            )
            servers.append(served)
            path = console.container["readinessProbe"]["httpGet"]["path"]
            with urllib.request.urlopen(f"http://127.0.0.1:{served.port}{path}", timeout=10) as answer:
                assert answer.status == 200
        finally:
            for server in reversed(servers):
                assert server.stop() == 0, server.stderr()
            for url in databases.values():
                drop_postgres_database(url)


RELAY_STREAM = "DECISIONFLOW_EVENTS"
RELAY_WITHIN = 90.0


def _relay_publishes_the_log(pod: _Pod, orchestrator_port: int, directory: Path) -> None:
    """The relay pod's command, environment and files, as its user: against the orchestrator (through the CA
    and the token of its Secret) and a NATS cluster of as many servers as its stream's replicas, it creates the
    stream, publishes every event of the log (the stream holds as many messages as the cursor it stored on its
    claim says) and, on SIGTERM, stores its cursor and exits 0."""
    cluster = start_nats(directory / "nats", size=int(pod.env["DECISIONFLOW_RELAY_STREAM_REPLICAS"]))
    try:
        local = {
            "DECISIONFLOW_ORCHESTRATOR_TARGET": f"localhost:{orchestrator_port}",
            "DECISIONFLOW_RELAY_NATS_URL": cluster.servers,
            "DECISIONFLOW_RELAY_METRICS_PORT": "0",
        }
        environment = {**_bare_environment(), **pod.env, **local}
        stderr = directory / "relay.stderr"
        with stderr.open("wb") as err:
            process = subprocess.Popen(
                pod.argv(pod.container["command"]),
                stdout=subprocess.DEVNULL,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=environment,
                cwd=pod.root,
            )
        cursor = Path(pod.env["DECISIONFLOW_RELAY_CURSOR_FILE"])
        try:
            started = time.monotonic()
            while True:
                stored = int(cursor.read_text().strip() or 0) if cursor.exists() else 0
                if stored > 0 and stream_messages(cluster.servers, RELAY_STREAM) == stored:
                    break
                assert process.poll() is None, f"the relay exited {process.returncode}: {stderr.read_text()[-2000:]}"
                assert time.monotonic() - started < RELAY_WITHIN, f"cursor {stored}: {stderr.read_text()[-2000:]}"
                time.sleep(0.5)
        finally:
            process.send_signal(signal.SIGTERM)
            ended = process.wait(timeout=60)
        assert ended == 0, stderr.read_text()[-2000:]
        assert cursor.stat().st_uid == UID and int(cursor.read_text()) == stored
    finally:
        cluster.close()


def _approve_once(secrets: Path, port: int, directory: Path) -> None:
    """A person's start and approve with their tokens over TLS: COMMITTED; without a token: refused."""
    proposal = directory / "T-8.json"
    proposal.write_text(
        '{"case_id": "T-8", "action": "record_support_review", "body": "Known firmware issue.", '
        '"evidence": [{"source_id": "HOLD-8", "version": 4, "quotation": "Firmware 4.2.0 may hold."}], '
        '"policy": {"name": "support-replies", "version_label": "2026-10", "allowance_units": 9, "rules": {}}}'
    )
    client = [str(Path(sys.executable).with_name("decisionflow"))]
    common = ["--target", f"localhost:{port}", "--ca-file", str(secrets / "ca.pem")]

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*client, *argv, *common], capture_output=True, text=True, timeout=60, check=False, env=_bare_environment()
        )

    started = run("start", str(proposal), "--token-file", str(secrets / "author.token"))
    assert started.returncode == 0, started.stderr
    operation = json.loads(started.stdout)["operation_id"]
    approved = run("approve", operation, "--token-file", str(secrets / "reviewer.token"))
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["state"] == "COMMITTED"
    assert run("approve", operation).returncode == 3
