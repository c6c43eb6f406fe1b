"""A kubelet's part that kwok leaves out, for a deployment's replicas on the local control plane.

kwok moves pods through their phases and gives them an IP (from the loopback range that
platform/services/components/kubernetes hands it, so that this host can reach it) but runs no
process. This runs what a kubelet would for each Running pod of the watched attempts: the
container's command, with its environment (values, and the pod's IP where the downward API
asks for status.podIP), its working directory, as its securityContext's user and group (and
the user's other groups: below), in a process group of its own; it kills the group when the
pod goes away. The command is the manifest's own, unchanged (the backend's launcher, then the
replica's script, then the engine from the cluster's serving_engine), so everything the
platform put in the pod is exercised."""

import base64
import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path

from kubernetes import client


class Kubelet:
    def __init__(self, api: client.ApiClient, *, label_selector: str, log_dir: Path):
        self.core = client.CoreV1Api(api)
        self.selector = label_selector
        self.log_dir = log_dir
        self.running: dict[str, subprocess.Popen] = {}  # pod uid -> its container's process
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "Kubelet":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        for uid in list(self.running):
            self._kill(uid)

    def _loop(self) -> None:
        while not self.stop.wait(0.2):
            pods = self.core.list_pod_for_all_namespaces(label_selector=self.selector).items
            live = {}
            for pod in pods:
                status = pod.status
                if (
                    status.phase == "Running"
                    and status.pod_ip
                    and not pod.metadata.deletion_timestamp
                ):
                    live[pod.metadata.uid] = pod
            for uid in set(self.running) - set(live):
                self._kill(uid)
            for uid, pod in live.items():
                if uid not in self.running:
                    self.running[uid] = self._start(pod)

    def _start(self, pod) -> subprocess.Popen:
        (container,) = pod.spec.containers
        env = {}
        for var in container.env or []:
            if var.value_from is not None and var.value_from.secret_key_ref is not None:
                # as a kubelet does: the key of the pod's namespace's Secret (the engine key)
                ref = var.value_from.secret_key_ref
                secret = self.core.read_namespaced_secret(ref.name, pod.metadata.namespace)
                env[var.name] = base64.b64decode(secret.data[ref.key]).decode()
            elif var.value_from is not None:
                assert var.value_from.field_ref.field_path == "status.podIP", var
                env[var.name] = pod.status.pod_ip
            else:
                env[var.name] = var.value or ""
        security = container.security_context
        assert security.run_as_user >= 1000 and security.run_as_non_root, security
        with (self.log_dir / f"{pod.metadata.name}.log").open("ab") as log:
            return subprocess.Popen(
                [*container.command, *(container.args or [])],
                env=env,
                cwd=container.working_dir,
                user=security.run_as_user,
                group=security.run_as_group,
                # the pod sees its project's tree as a volume mounted at the same path; here the
                # path's parents lie on this host, where the user's groups (from the directory,
                # as a Slurm job gets them) let it through them
                extra_groups=os.getgrouplist(env["USER"], security.run_as_group),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _kill(self, uid: str) -> None:
        process = self.running.pop(uid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def kill_engine(self) -> None:
        """The engine of every running pod dies (its container ends; kwok does not see it)."""
        for process in self.running.values():
            os.killpg(process.pid, signal.SIGKILL)
