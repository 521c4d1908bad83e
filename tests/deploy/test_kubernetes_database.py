"""The production overlay's databases (deploy/kubernetes/overlays/production/database), rendered by the
real kustomize: two CloudNativePG clusters, one per service, and the NetworkPolicy that lets their
pods be reached through the namespace's default-deny; each cluster checked strictly (no field the
operator's schema does not know, every type and enum as it declares) against the Cluster schema of
CloudNativePG 1.30.0 (tests/deploy/schemas), and for what the services rely on: three instances,
one synchronous standby that a commit must wait for, the database and owner each service's URL
names, and the PostgreSQL major version the tests run against."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.support.kubernetes import PRODUCTION, parse, render, validate

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

DATABASE = PRODUCTION / "database"
SCHEMA = Path(__file__).parent / "schemas" / "cnpg-cluster-v1.30.0.json"
SERVICES = ("orchestrator", "receiver")


@pytest.fixture(scope="module")
def rendered(kustomize: str) -> str:
    return render(kustomize, DATABASE)


@pytest.fixture(scope="module")
def clusters(rendered: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in parse(rendered) if o["kind"] == "Cluster"}


def test_the_render_is_two_clusters_and_their_network_policy(rendered: str, tmp_path: Path) -> None:
    kinds = sorted((o["apiVersion"], o["kind"]) for o in parse(rendered))
    assert kinds == [("networking.k8s.io/v1", "NetworkPolicy"), *[("postgresql.cnpg.io/v1", "Cluster")] * 2]
    file = tmp_path / "database.yaml"
    file.write_text(rendered)
    checked = validate(file, "1.37.0")  # the NetworkPolicy strictly; the Clusters below
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_database_pods_admit_the_services_their_peers_and_the_operator(rendered: str) -> None:
    [policy] = [o for o in parse(rendered) if o["kind"] == "NetworkPolicy"]
    instances = {
        "matchExpressions": [{"key": "cnpg.io/cluster", "operator": "In", "values": ["orchestrator-db", "receiver-db"]}]
    }
    assert policy["spec"]["podSelector"] == instances
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    postgres, operator = policy["spec"]["ingress"]
    assert postgres["ports"] == [{"protocol": "TCP", "port": 5432}]
    assert postgres["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "decisionflow"}}},
        {"podSelector": instances},
    ]
    assert {p["port"] for p in operator["ports"]} == {8000, 5432}
    assert operator["from"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "cnpg-system"}}


def unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """The paths in value that schema does not declare (the API server's strict decoding refuses them)."""
    if isinstance(value, dict) and "properties" in schema:
        found = []
        for key, item in value.items():
            if key in schema["properties"]:
                found += unknown_fields(item, schema["properties"][key], f"{path}.{key}")
            elif not isinstance(schema.get("additionalProperties"), dict):
                found.append(f"{path}.{key}")
        return found
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [p for i, item in enumerate(value) for p in unknown_fields(item, schema["items"], f"{path}[{i}]")]
    return []


def test_each_service_has_its_own_cluster_in_the_production_namespace(clusters: dict[str, dict[str, Any]]) -> None:
    assert sorted(clusters) == [f"{service}-db" for service in SERVICES]
    assert {c["metadata"]["namespace"] for c in clusters.values()} == {"decisionflow"}


def test_every_cluster_validates_strictly_against_the_operators_schema(clusters: dict[str, dict[str, Any]]) -> None:
    schema = json.loads(SCHEMA.read_text())
    for name, cluster in clusters.items():
        jsonschema.validate(cluster, schema)
        assert unknown_fields(cluster, schema) == [], name


def test_the_schema_check_catches_what_the_operator_would_refuse(clusters: dict[str, dict[str, Any]]) -> None:
    schema = json.loads(SCHEMA.read_text())
    cluster = json.loads(json.dumps(clusters["orchestrator-db"]))
    cluster["spec"]["postgresql"]["synchronous"]["dataDurabilty"] = "required"  # misspelt
    assert unknown_fields(cluster, schema) == [".spec.postgresql.synchronous.dataDurabilty"]
    cluster["spec"]["postgresql"]["synchronous"]["method"] = "all"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(cluster, schema)


@pytest.mark.parametrize("service", SERVICES)
def test_a_commit_waits_for_one_of_two_standbys(clusters: dict[str, dict[str, Any]], service: str) -> None:
    spec = clusters[f"{service}-db"]["spec"]
    assert spec["instances"] == 3
    assert spec["postgresql"]["synchronous"] == {"method": "any", "number": 1, "dataDurability": "required"}


@pytest.mark.parametrize("service", SERVICES)
def test_the_database_and_owner_are_the_ones_the_service_url_names(
    clusters: dict[str, dict[str, Any]], service: str
) -> None:
    spec = clusters[f"{service}-db"]["spec"]
    assert spec["bootstrap"]["initdb"] == {"database": service, "owner": service}
    assert spec["enableSuperuserAccess"] is False
    # The major version the compose file runs and the tests run against.
    assert spec["imageName"].rsplit(":", 1)[1] == "15"
