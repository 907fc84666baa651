"""The baseline of bench/ft_bench's faults part: the same MLP, batch and data, trained data-parallel
by workers under torch.distributed.elastic's launcher (what torchrun runs: elastic_launch, a
LocalElasticAgent with c10d rendezvous), DistributedDataParallel over Gloo, and a torch.save
checkpoint every --ckpt-every steps by rank 0 (temp file, fsync, rename). A worker's failure makes
the launcher stop every worker and start them all again (up to --max-restarts), and they resume
from the newest checkpoint: the work since it is lost.

    python3 torch_elastic_train.py DIR --workers 4 --steps 200 --batch 64 --hidden 512
                                   --ckpt-every 10 --max-restarts 100 --monitor-interval 5

Lines on stdout (one os.write each, so lines of several workers never mix):
    PID <rank> <pid>            a worker started (after every restart)
    RESUME <step>               rank 0 loaded the checkpoint of that step
    STEP <step> <monotonic s>   rank 0 finished that step (DDP: every worker has reduced it)
    END <monotonic s>           the launcher returned; FAILED <reason> when it gave up
Debian's torchrun script itself is broken on Python 3.11, so the launcher API is called directly,
with torchrun's default monitor interval (5 s).
"""
import argparse
import glob
import os
import socket
import time


def say(line):
    os.write(1, (line + "\n").encode())


def worker(a):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    say("PID %d %d" % (rank, os.getpid()))
    dist.init_process_group("gloo")
    g = torch.Generator().manual_seed(a.seed)
    teacher = torch.randn(a.inputs, a.classes, generator=g)
    model = torch.nn.Sequential(torch.nn.Linear(a.inputs, a.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(a.hidden, a.classes))
    with torch.no_grad():
        for p in model.parameters():
            fan_in = p.size(1) if p.dim() > 1 else a.hidden
            p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=a.lr)
    step = 0
    saved = sorted(glob.glob(os.path.join(a.dir, "ckpt-*.pt")))
    if saved:
        state = torch.load(saved[-1])
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        if rank == 0:
            say("RESUME %d" % step)
    while step < a.steps:
        first = (step * world + rank) * a.batch
        x = torch.randn(a.batch, a.inputs, generator=torch.Generator().manual_seed(a.seed * 1000003 + first))
        y = (x @ teacher).argmax(1)
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        step += 1
        if rank != 0:
            continue
        say("STEP %d %r" % (step, time.monotonic()))
        if a.ckpt_every and step % a.ckpt_every == 0:
            path = os.path.join(a.dir, "ckpt-%012d.pt" % step)
            with open(path + ".tmp", "wb") as f:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(path + ".tmp", path)
            for old in sorted(glob.glob(os.path.join(a.dir, "ckpt-*.pt")))[:-2]:
                os.remove(old)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--inputs", type=int, default=32)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--max-restarts", type=int, default=100)
    p.add_argument("--monitor-interval", type=float, default=5)
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=a.workers, run_id="sceptre-ft-bench",
                          rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:%d" % free_port(),
                          max_restarts=a.max_restarts, monitor_interval=a.monitor_interval, start_method="spawn")
    try:
        elastic_launch(config, worker)(a)
        say("END %r" % time.monotonic())
    except Exception as e:  # noqa: BLE001 - any end of the launch but success
        say("FAILED %s" % type(e).__name__)


if __name__ == "__main__":
    main()
