"""``python -m e2e.framework.kubelet --kubeconfig K --data-dir D [--node-name N] [--provision-only]``: the test kubelet
(or its provisioner alone) until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from e2e.framework.kube import Kube
from e2e.framework.kubelet import __doc__ as kubelet_doc
from e2e.framework.kubelet.base import log
from e2e.framework.kubelet.testkubelet import TestKubelet


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.framework.kubelet",
                                 description=(kubelet_doc or "").split("\n\n")[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--data-dir", required=True, type=Path)
    ap.add_argument("--node-name", default="pidispatch-node")
    ap.add_argument("--no-mount-namespace", action="store_true",
                    help="run processes without a private mount namespace (paths are not remapped)")
    ap.add_argument("--provision-only", action="store_true",
                    help="only provision hostPath PVs for pending PVCs (no Node, no Pods): beside a real kubelet")
    ap.add_argument("--no-bind", action="store_true",
                    help="leave unscheduled Pods to a scheduler (several nodes beside the real kube-scheduler)")
    ap.add_argument("--no-provision", action="store_true", help="another process provisions PVs")
    ap.add_argument("--exclusive-attach", action="store_true",
                    help="ReadWriteOnce volumes attach to one node at a time, as cloud block volumes do")
    ap.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="one more label on the Node")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s: %(message)s")
    factory = lambda: Kube.from_kubeconfig(a.kubeconfig)  # noqa: E731
    port = int(factory().server.rsplit(":", 1)[1])
    kl = TestKubelet(factory, a.data_dir, a.node_name,
                     use_mount_namespace=False if a.no_mount_namespace or os.environ.get(
                         "PIDISPATCH_KUBELET_NO_MOUNT_NAMESPACE") else None, server_port=port,
                     bind_pods=not a.no_bind, provision=not a.no_provision, exclusive_attach=a.exclusive_attach,
                     labels=dict(label.split("=", 1) for label in a.label))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    kl.run(provision_only=a.provision_only)
    stop.wait()
    log.info("stopping")
    kl.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
