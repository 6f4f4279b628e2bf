"""Test kubelet: registers a Node, schedules pending Pods onto it and *runs* them as local processes.

There is no container runtime on these machines. This process plays scheduler + kubelet + a tiny
volume provisioner against the real kube-apiserver:

* registers Node ``--node-name`` (Ready, heartbeated) and binds every unscheduled Pod to it
  (``pods/binding``, as the scheduler does);
* runs each container's ``command`` + ``args`` (``$(VAR)`` expanded) with the Pod's ``env`` /
  ``envFrom`` and ``workingDir`` (created if missing) as a local process. The image is ignored; a
  container without ``command`` fails with reason ``NoCommand``. ``securityContext`` (runAsUser,
  capabilities, ...) is ignored: processes run as the kubelet's user;
* maps every volume to a local directory: PVC -> the bound PV's hostPath (this process provisions
  hostPath PVs for pending PVCs under ``DATA/pv``), emptyDir -> ``DATA/pods/<uid>/volumes/<name>``,
  hostPath as is, configMap/secret/downwardAPI/projected (incl. a real ServiceAccount token from the
  TokenRequest API) materialised as files. ``subPath``/``subPathExpr`` and ``readOnly`` are honoured;
* when running as root, the process gets a private mount namespace (``unshare --mount``) in which
  each volume is bind-mounted at its container path (e.g. ``/session``) and the termination message
  file at ``terminationMessagePath``. Mount points that do not exist are created on the host (empty
  directories/files; the host never sees the bind mounts). Without root, the process runs with no
  mounts applied and the env var ``PIDISPATCH_KUBELET_MOUNTS`` (JSON ``{containerPath: hostPath}``)
  describes the mapping it would have had;
* reports status through ``pods/status`` like a kubelet: Pending -> Running -> Succeeded/Failed with
  ``state.terminated.exitCode``/``reason``/``message`` (termination message file, max 4096 bytes,
  ``FallbackToLogsOnError`` honoured), conditions, restart counts (restartPolicy honoured);
* on graceful deletion it sends SIGTERM, SIGKILL after the grace period, and deletes the Pod with
  grace period 0;
* as a real kubelet does: ``activeDeadlineSeconds`` stops the Pod (SIGTERM, then SIGKILL) and fails it
  with ``reason: DeadlineExceeded``; a container whose env names a missing Secret or ConfigMap waits
  (``CreateContainerConfigError``, the Pod stays Pending) until it appears; an image from the registry
  ``unpullable.invalid`` (a reserved domain) cannot be pulled (``ErrImagePull``, then
  ``ImagePullBackOff``) and its Pod stays Pending, so a nonexistent image can be tried without a
  registry (every other image is ignored, as before). Container
  stdout+stderr go to ``DATA/pods/<ns>_<pod>_<uid>/logs/<container>.log``
  (``kubectl logs`` does not work: there is no kubelet API server).

Run standalone: ``python -m e2e.framework.kubelet --kubeconfig K --data-dir D [--node-name N]``.

One concern per module: ``node`` (registration, heartbeat), ``scheduling`` (binding, final deletion),
``provisioner`` (hostPath PVs for PVCs), ``testkubelet`` (the list/watch loops that drive them),
``pods`` (one Pod's lifecycle, its containers as processes, its status), ``config`` (env, ``envFrom``,
``fieldRef``: what a container is configured from), ``volumes`` (volumes as local directories and files).
"""

from e2e.framework.kubelet.base import PodFailed, Waiting, expand, pod_dir_name
from e2e.framework.kubelet.pods import PodRunner
from e2e.framework.kubelet.testkubelet import TestKubelet

__all__ = ["PodFailed", "PodRunner", "TestKubelet", "Waiting", "expand", "pod_dir_name"]
