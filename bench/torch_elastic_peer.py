"""The peer of bench/supervision_bench: two workers under torch.distributed.elastic's launcher.

torchrun is a command line over this launcher (elastic_launch, a LocalElasticAgent with c10d
rendezvous); Debian's torchrun script itself is broken on Python 3.11, so the launcher API is
called directly with torchrun's defaults (monitor_interval 5 s, c10d rendezvous on localhost) and
no restarts, so that a worker's failure ends the launch.

    python3 torch_elastic_peer.py DIR

Prints "WORKERS <pid of worker 0> <pid of worker 1>" once both run, then, when the launcher has
noticed a worker's failure, "NOTICED <time.monotonic()>" (CLOCK_MONOTONIC, the clock the
benchmark reads too).
"""
import os
import socket
import sys
import time

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch


def worker(directory):
    rank = os.environ["LOCAL_RANK"]
    with open(os.path.join(directory, "pid." + rank), "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    directory = sys.argv[1]
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=2,
        run_id="sceptre-bench",
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:%d" % free_port(),
        max_restarts=0,
        monitor_interval=5,
        start_method="spawn",
    )
    import threading

    def announce():
        paths = [os.path.join(directory, "pid.%d" % r) for r in range(2)]
        while not all(os.path.exists(p) and os.path.getsize(p) > 0 for p in paths):
            time.sleep(0.01)
        pids = [open(p).read().strip() for p in paths]
        print("WORKERS", pids[0], pids[1], flush=True)

    threading.Thread(target=announce, daemon=True).start()
    try:
        elastic_launch(config, worker)(directory)
    except ChildFailedError:
        print("NOTICED", repr(time.monotonic()), flush=True)
        return
    except Exception as e:  # noqa: BLE001 - any other end of the launch is also its notice
        print("NOTICED", repr(time.monotonic()), type(e).__name__, flush=True)
        return


if __name__ == "__main__":
    main()
