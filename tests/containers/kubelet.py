"""A kubelet's part played with podman: the pods of a rendered namespace started from their templates.

What is carried over from each pod template, as a kubelet does it:
- the container's ``command`` (the image's entrypoint, and its CMD dropped) and ``args``, ``workingDir``;
- its environment: the Services' link variables (``enableServiceLinks``), ``envFrom``, then ``env`` with
  ``value`` (``$(VAR)`` expanded), ``configMapKeyRef``, ``secretKeyRef`` and ``fieldRef``;
- Secret and ConfigMap volumes written as files (owner root, group ``fsGroup``, the volume's or item's
  mode) and mounted read-only, ``items`` and ``subPath`` honoured; ``emptyDir`` as a writable folder of
  group ``fsGroup``; a ``persistentVolumeClaim`` as one writable folder per claim, shared by every pod
  that mounts it (owner root, group ``fsGroup``, setgid, as a provisioner that applies ``fsGroup`` gives it);
- the security context: ``runAsUser``/``runAsGroup``, ``fsGroup`` and ``supplementalGroups`` as groups,
  ``runAsNonRoot`` checked, ``readOnlyRootFilesystem`` (no tmpfs anywhere: podman's own /tmp and /run
  are turned off), ``capabilities``, ``allowPrivilegeEscalation: false`` as no-new-privileges, the
  runtime's default seccomp profile;
- resources: the CPU and memory limits, the CPU request as CPU shares;
- exec, httpGet and tcpSocket probes, each with its timeout and failure threshold;
- termination: the ``preStop`` hook, then SIGTERM, SIGKILL when ``terminationGracePeriodSeconds`` ends.

What differs, because every pod here shares the host's network (the machine's PostgreSQL listens on
loopback only): a Service's names (and ``NAME.NAMESPACE[.svc[.cluster.local]]``) resolve to 127.0.0.1
through the container's /etc/hosts, so a Service must send its port to the same container port, each
container port must be free on this machine, and one replica runs per workload (two would need the
same port). Probes are retried every half second instead of every ``periodSeconds``. A feature of a
pod template that is not carried over fails the test with its name rather than being dropped.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.containers import ULIMITS, podman

LOOPBACK = "127.0.0.1"
PROBE_INTERVAL = 0.5
# How long a pod may stay not ready before the test gives up on it (a kubelet would go on probing).
READY_WITHIN = 90.0
_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "m": 10**-3}


def unsupported(feature: str, where: str) -> None:
    """Fail on a pod template feature this kubelet does not carry over."""
    pytest.fail(f"{where}: {feature} is not run by the test's kubelet (tests/containers/kubelet.py)")


def _quantity(quantity: str | int | float) -> tuple[float, str]:
    found = _QUANTITY.match(str(quantity))
    assert found, f"not a Kubernetes quantity: {quantity!r}"
    return float(found[1]), found[2]


def cpu(quantity: str | int | float) -> float:
    """A CPU quantity in cores ("500m" is 0.5)."""
    number, suffix = _quantity(quantity)
    return number * _DECIMAL[suffix]


def memory(quantity: str | int) -> int:
    """A memory quantity in bytes ("320Mi" is 335544320)."""
    number, suffix = _quantity(quantity)
    return int(number * (_BINARY.get(suffix) or _DECIMAL[suffix]))


@dataclass(frozen=True)
class Workload:
    """A Deployment's, Job's or CronJob's pod template, by the workload's name."""

    name: str
    kind: str
    template: dict[str, Any]

    @property
    def spec(self) -> dict[str, Any]:
        """The pod spec."""
        spec: dict[str, Any] = self.template["spec"]
        return spec

    @property
    def container(self) -> dict[str, Any]:
        """The pod's one container (init and sidecar containers are not run here)."""
        if self.spec.get("initContainers"):
            unsupported("initContainers", self.name)
        containers: list[dict[str, Any]] = self.spec["containers"]
        if len(containers) != 1:
            unsupported("a pod of several containers", self.name)
        return containers[0]

    @property
    def grace(self) -> float:
        """terminationGracePeriodSeconds (Kubernetes' default 30)."""
        return float(self.spec.get("terminationGracePeriodSeconds", 30))


def workloads(objects: Iterable[dict[str, Any]]) -> dict[str, Workload]:
    """Each Deployment, Job and CronJob of a render, by name."""
    found = {}
    for o in objects:
        if o["kind"] in ("Deployment", "Job"):
            found[o["metadata"]["name"]] = Workload(o["metadata"]["name"], o["kind"], o["spec"]["template"])
        elif o["kind"] == "CronJob":
            template = o["spec"]["jobTemplate"]["spec"]["template"]
            found[o["metadata"]["name"]] = Workload(o["metadata"]["name"], o["kind"], template)
        elif o["kind"] in ("StatefulSet", "DaemonSet", "Pod", "ReplicaSet"):
            unsupported(f"a {o['kind']}", o["metadata"]["name"])
    return found


@dataclass(frozen=True)
class Probed:
    """One probe's attempts: whether one succeeded, and what the last said."""

    passed: bool
    attempts: int
    said: str


@dataclass(frozen=True)
class Terminated:
    """How a container ended: its exit code, whether SIGKILL ended it, and how long it took."""

    exit_code: int
    killed: bool
    seconds: float
    pre_stop: str


@dataclass
class Namespace:
    """The rendered objects of one namespace, run on this machine's podman."""

    objects: list[dict[str, Any]]
    image: str
    root: Path
    prefix: str
    # Extra host names (the database's) and the addresses they stand for.
    extra_hosts: dict[str, str] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)

    def named(self, kind: str, name: str) -> dict[str, Any]:
        """The one object of kind and name."""
        found = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        if not found:
            pytest.fail(f"no {kind} named {name} in the render")
        return found[0]

    @property
    def namespace(self) -> str:
        """The namespace the objects are in."""
        names = {o["metadata"].get("namespace") for o in self.objects if o["kind"] != "Namespace"}
        names.discard(None)
        assert len(names) == 1, f"one namespace expected, the render has {names}"
        return str(names.pop())

    def services(self) -> list[dict[str, Any]]:
        """The namespace's Services."""
        return [o for o in self.objects if o["kind"] == "Service"]

    def hosts(self) -> list[str]:
        """--add-host arguments: every Service's names, and the extra hosts."""
        names: dict[str, str] = dict(self.extra_hosts)
        for service in self.services():
            name = service["metadata"]["name"]
            for alias in (name, f"{name}.{self.namespace}", f"{name}.{self.namespace}.svc"):
                names[alias] = LOOPBACK
            names[f"{name}.{self.namespace}.svc.cluster.local"] = LOOPBACK
        return [argument for host, address in names.items() for argument in ("--add-host", f"{host}:{address}")]

    def check_services_keep_their_ports(self) -> None:
        """Fail unless every Service port is its pods' container port (the host network keeps ports as they are)."""
        pods = workloads(self.objects)
        for service in self.services():
            selector = service["spec"].get("selector", {})
            selected = [w for w in pods.values() if selector.items() <= w.template["metadata"]["labels"].items()]
            for port in service["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                for workload in selected:
                    ports = {p.get("name"): p["containerPort"] for p in workload.container.get("ports", [])}
                    number = ports.get(target, target) if isinstance(target, str) else target
                    assert number == port["port"], (
                        f"Service {service['metadata']['name']} sends port {port['port']} to {workload.name}'s "
                        f"{number}: on the host's network the test can only run a Service that keeps its port"
                    )

    def _service_links(self) -> dict[str, str]:
        """The variables a kubelet sets for each Service with a cluster IP (here 127.0.0.1)."""
        env: dict[str, str] = {}
        for service in self.services():
            if service["spec"].get("clusterIP") == "None":
                continue  # headless: no link variables
            name = service["metadata"]["name"].upper().replace("-", "_")
            ports = service["spec"]["ports"]
            env[f"{name}_SERVICE_HOST"] = LOOPBACK
            env[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
            env[f"{name}_PORT"] = f"{ports[0].get('protocol', 'TCP').lower()}://{LOOPBACK}:{ports[0]['port']}"
            for port in ports:
                protocol = port.get("protocol", "TCP")
                if "name" in port:
                    env[f"{name}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(port["port"])
                prefix = f"{name}_PORT_{port['port']}_{protocol}"
                env[prefix] = f"{protocol.lower()}://{LOOPBACK}:{port['port']}"
                env[f"{prefix}_PROTO"] = protocol.lower()
                env[f"{prefix}_PORT"] = str(port["port"])
                env[f"{prefix}_ADDR"] = LOOPBACK
        return env

    def _data(self, kind: str, name: str) -> dict[str, bytes]:
        source = self.named(kind, name)
        if kind == "Secret":
            data = {k: base64.b64decode(v) for k, v in source.get("data", {}).items()}
            return data | {k: v.encode() for k, v in source.get("stringData", {}).items()}
        data = {k: v.encode() for k, v in source.get("data", {}).items()}
        return data | {k: base64.b64decode(v) for k, v in source.get("binaryData", {}).items()}

    def environment(self, workload: Workload, pod_name: str) -> dict[str, str]:
        """The container's environment as a kubelet assembles it."""
        container = workload.container
        env = self._service_links() if workload.spec.get("enableServiceLinks", True) else {}
        for source in container.get("envFrom", []):
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                data = self._data("ConfigMap", source["configMapRef"]["name"])
            elif "secretRef" in source:
                data = self._data("Secret", source["secretRef"]["name"])
            else:
                unsupported(f"envFrom {sorted(source)}", workload.name)
            env |= {prefix + k: v.decode() for k, v in data.items()}
        fields = {"metadata.name": pod_name, "metadata.namespace": self.namespace, "status.podIP": LOOPBACK}
        fields |= {"status.hostIP": LOOPBACK, "spec.nodeName": socket.gethostname()}
        for entry in container.get("env", []):
            if "value" in entry or "valueFrom" not in entry:
                env[entry["name"]] = _expand(entry.get("value", ""), env)
                continue
            source = entry["valueFrom"]
            if "configMapKeyRef" in source:
                ref = source["configMapKeyRef"]
                env[entry["name"]] = self._data("ConfigMap", ref["name"])[ref["key"]].decode()
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                env[entry["name"]] = self._data("Secret", ref["name"])[ref["key"]].decode()
            elif "fieldRef" in source and source["fieldRef"]["fieldPath"] in fields:
                env[entry["name"]] = fields[source["fieldRef"]["fieldPath"]]
            else:
                unsupported(f"env {entry['name']} from {source}", workload.name)
        return env

    def _volumes(self, workload: Workload, folder: Path) -> list[str]:
        """Write the pod's volumes under folder and return the --volume arguments of its mounts."""
        spec = workload.spec
        group = spec.get("securityContext", {}).get("fsGroup", 0)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        written: dict[str, Path] = {}
        for name, volume in volumes.items():
            place = folder / name
            place.mkdir(parents=True)
            if "secret" in volume or "configMap" in volume:
                kind, source = (
                    ("Secret", volume["secret"]) if "secret" in volume else ("ConfigMap", volume["configMap"])
                )
                data = self._data(kind, source.get("secretName") or source["name"])
                default = source.get("defaultMode", 0o644)
                items = source.get("items") or [{"key": k, "path": k} for k in sorted(data)]
                for item in items:
                    file = place / item["path"]
                    file.parent.mkdir(parents=True, exist_ok=True)
                    file.write_bytes(data[item["key"]])
                    _own(file, group, item.get("mode", default))
                _own_folders(place, group, 0o3777)
            elif "emptyDir" in volume:
                _own_folders(place, group, 0o2777)
            elif "persistentVolumeClaim" in volume:
                place.rmdir()
                place = folder.parent / "claims" / volume["persistentVolumeClaim"]["claimName"]
                if not place.exists():
                    place.mkdir(parents=True)
                    _own(place, group, 0o2775)
            else:
                unsupported(f"volume {name} of type {sorted(set(volume) - {'name'})}", workload.name)
            written[name] = place
        arguments = []
        for mount in workload.container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            source = written[mount["name"]] / mount.get("subPath", "")
            # Secret and ConfigMap volumes are read-only whatever the mount says.
            read_only = mount.get("readOnly", False) or not {"emptyDir", "persistentVolumeClaim"} & set(volume)
            arguments += ["--volume", f"{source}:{mount['mountPath']}:{'ro' if read_only else 'rw'}"]
        return arguments

    def _security(self, workload: Workload) -> list[str]:
        pod = workload.spec.get("securityContext", {})
        own = workload.container.get("securityContext", {})
        arguments: list[str] = []
        user, group = own.get("runAsUser", pod.get("runAsUser")), own.get("runAsGroup", pod.get("runAsGroup"))
        if own.get("runAsNonRoot", pod.get("runAsNonRoot")) and not user:
            pytest.fail(f"{workload.name}: runAsNonRoot without a runAsUser: a kubelet would check the image's user")
        if user is not None:
            arguments += ["--user", f"{user}:{group if group is not None else user}"]
        for extra in [pod.get("fsGroup"), *pod.get("supplementalGroups", [])]:
            if extra is not None:
                arguments += ["--group-add", str(extra)]
        if own.get("readOnlyRootFilesystem"):
            arguments += ["--read-only", "--read-only-tmpfs=false"]
        capabilities = own.get("capabilities", {})
        arguments += [f"--cap-drop={c}" for c in capabilities.get("drop", [])]
        arguments += [f"--cap-add={c}" for c in capabilities.get("add", [])]
        if own.get("allowPrivilegeEscalation") is False:
            arguments += ["--security-opt", "no-new-privileges"]
        if own.get("privileged"):
            arguments += ["--privileged"]
        seccomp = own.get("seccompProfile", pod.get("seccompProfile", {"type": "RuntimeDefault"}))["type"]
        if seccomp == "Unconfined":
            arguments += ["--security-opt", "seccomp=unconfined"]
        elif seccomp != "RuntimeDefault":
            unsupported(f"seccompProfile {seccomp}", workload.name)
        return arguments

    def _resources(self, workload: Workload) -> list[str]:
        resources = workload.container.get("resources", {})
        limits, requests = resources.get("limits", {}), resources.get("requests", {})
        arguments = []
        if "cpu" in limits:
            arguments += ["--cpus", f"{cpu(limits['cpu']):g}"]
        if "memory" in limits:
            arguments += ["--memory", str(memory(limits["memory"]))]
        if "cpu" in requests:
            arguments += ["--cpu-shares", str(max(2, int(cpu(requests["cpu"]) * 1024)))]
        return arguments

    def podman_run(self, workload: Workload, *, detach: bool) -> tuple[str, list[str]]:
        """The container's name and the podman run arguments that start the workload's pod."""
        container = workload.container
        name = f"{self.prefix}-{workload.name}"
        env = self.environment(workload, name)
        arguments = ["run", "--name", name, "--hostname", name, "--pull=never", *ULIMITS, "--network", "host"]
        arguments += ["--detach"] if detach else []
        arguments += self.hosts() + self._security(workload) + self._resources(workload)
        arguments += self._volumes(workload, self.root / name)
        arguments += [argument for k, v in env.items() for argument in ("--env", f"{k}={v}")]
        if "workingDir" in container:
            arguments += ["--workdir", container["workingDir"]]
        if "command" in container:
            arguments += ["--entrypoint", json.dumps(container["command"])]
        return name, [*arguments, self.image, *container.get("args", [])]

    def start(self, workload: Workload) -> Pod:
        """Start a Deployment's pod, its container ports first checked free on this machine."""
        for port in workload.container.get("ports", []):
            _free(port["containerPort"], workload.name)
        name, arguments = self.podman_run(workload, detach=True)
        self.started.append(name)
        done = podman(*arguments, timeout=120)
        assert done.returncode == 0, f"{workload.name} did not start: {done.stderr}"
        return Pod(workload, name)

    def complete(self, workload: Workload) -> subprocess.CompletedProcess[str]:
        """Run a Job's pod to its end (within activeDeadlineSeconds) and return what it did."""
        name, arguments = self.podman_run(workload, detach=False)
        self.started.append(name)
        return podman(*arguments, timeout=float(workload.spec.get("activeDeadlineSeconds", 600)))

    def remove_all(self) -> None:
        """Remove every container this namespace started."""
        for name in self.started:
            podman("rm", "--force", "--time", "0", name, timeout=60)


@dataclass(frozen=True)
class Pod:
    """A running pod's container."""

    workload: Workload
    name: str

    def running(self) -> bool:
        """Whether the container is still running."""
        done = podman("inspect", "--format", "{{.State.Running}}", self.name)
        return done.stdout.strip() == "true"

    def logs(self) -> str:
        """The container's output so far (the last 3000 characters)."""
        done = podman("logs", self.name)
        return (done.stdout + done.stderr)[-3000:]

    def exec(self, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a command in the container (as its user, with its capabilities), as a kubelet's exec does."""
        try:
            return podman("exec", self.name, *argv, timeout=timeout)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, -1, "", f"timed out after {timeout} s")

    def _attempt(self, probe: dict[str, Any]) -> tuple[bool, str]:
        timeout = float(probe.get("timeoutSeconds", 1))
        if "exec" in probe:
            done = self.exec(probe["exec"]["command"], timeout=timeout)
            return done.returncode == 0, (done.stdout + done.stderr).strip()[-500:]
        ports = {p.get("name"): p["containerPort"] for p in self.workload.container.get("ports", [])}
        if "httpGet" in probe:
            get = probe["httpGet"]
            port = ports.get(get["port"], get["port"])
            url = f"{get.get('scheme', 'HTTP').lower()}://{get.get('host', LOOPBACK)}:{port}{get.get('path', '/')}"
            request = urllib.request.Request(url, headers={h["name"]: h["value"] for h in get.get("httpHeaders", [])})
            try:
                with urllib.request.urlopen(request, timeout=timeout) as answer:
                    return 200 <= answer.status < 400, f"{url}: {answer.status}"
            except (urllib.error.URLError, OSError) as exc:
                return False, f"{url}: {exc}"
        if "tcpSocket" in probe:
            port = ports.get(probe["tcpSocket"]["port"], probe["tcpSocket"]["port"])
            try:
                socket.create_connection((LOOPBACK, int(port)), timeout=timeout).close()
                return True, f"port {port} open"
            except OSError as exc:
                return False, f"port {port}: {exc}"
        unsupported(f"a probe of type {sorted(probe)}", self.workload.name)
        raise AssertionError  # unreachable: unsupported fails

    def probe(self, kind: str) -> Probed:
        """Run the container's probe of kind as a kubelet would judge it: a startup or liveness probe fails
        after failureThreshold failures in a row; a readiness probe is retried until the pod is ready."""
        probe = self.workload.container[kind]
        threshold = int(probe.get("failureThreshold", 3))
        deadline = time.monotonic() + READY_WITHIN
        attempts, said = 0, ""
        while True:
            attempts += 1
            passed, said = self._attempt(probe)
            if passed:
                return Probed(True, attempts, said)
            if not self.running():
                return Probed(False, attempts, f"{said}; the container ended:\n{self.logs()}")
            if kind != "readinessProbe" and attempts >= threshold:
                return Probed(False, attempts, said)
            if time.monotonic() > deadline:
                return Probed(False, attempts, f"{said}; not ready within {READY_WITHIN:.0f} s")
            time.sleep(PROBE_INTERVAL)

    def status(self) -> dict[str, str]:
        """The fields of /proc/1/status of the container's main process."""
        done = self.exec(["cat", "/proc/1/status"])
        assert done.returncode == 0, done.stderr
        return dict(line.split(":\t", 1) for line in done.stdout.splitlines() if ":\t" in line)

    def terminate(self) -> Terminated:
        """End the pod as a kubelet does: the preStop hook, SIGTERM, SIGKILL when the grace period is over."""
        started = time.monotonic()
        hook = self.workload.container.get("lifecycle", {}).get("preStop", {})
        pre_stop = "none"
        if "exec" in hook:
            done = self.exec(hook["exec"]["command"], timeout=self.workload.grace)
            pre_stop = f"{hook['exec']['command']} exited {done.returncode}"
        elif hook:
            unsupported(f"a preStop hook of type {sorted(hook)}", self.workload.name)
        # A kubelet gives the container at least 2 s after the hook, whatever is left of the grace period.
        remaining = max(2, int(self.workload.grace - (time.monotonic() - started)))
        podman("stop", "--time", str(remaining), self.name, timeout=remaining + 60)
        seconds = time.monotonic() - started
        state = json.loads(podman("inspect", "--format", "{{json .State}}", self.name).stdout)
        exit_code = int(state["ExitCode"])
        return Terminated(exit_code, exit_code == 137, seconds, pre_stop)


def _expand(value: str, env: dict[str, str]) -> str:
    """$(VAR) replaced by an earlier variable's value ($$ escapes), as a kubelet expands env values."""

    def one(found: re.Match[str]) -> str:
        if found[0].startswith("$$"):
            return found[0][1:]
        return env.get(found[1], found[0])

    return re.sub(r"\$?\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, value)


def _own(path: Path, group: int, mode: int) -> None:
    os.chown(path, 0, group)
    path.chmod(mode)


def _own_folders(top: Path, group: int, mode: int) -> None:
    for folder in [top, *(p for p in top.rglob("*") if p.is_dir())]:
        _own(folder, group, mode)


def _free(port: int, workload: str) -> None:
    with socket.socket() as probe:
        # As a server binds (SO_REUSEADDR): a closed connection's TIME_WAIT does not hold the port.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as exc:
            pytest.fail(f"{workload}'s port {port} is taken on this machine (the pods share its network here): {exc}")
