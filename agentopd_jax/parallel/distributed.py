"""Multi-host runs: starting JAX's distributed runtime, and moving data between one process and the global mesh.

One process per host (a GPU node, a TPU VM worker) runs the same command. The train step runs on the global mesh
over every process's devices; everything else is process-local. Each process plays its contiguous share of the
iteration's episodes with its own env workers and its own sampler on its own devices (`local_mesh`), onto which the
global parameters are handed without a copy where the process already holds them whole (`to_local`). The update's
global batch is assembled from the processes' local rows (`put_process_rows`) after they agree on its shape
(`global_max`); small Python results (episode records, validation outcomes) are exchanged with `allgather`. Orbax
saves and restores across processes by itself; only process 0 writes logs and records.

A single-process run goes through the same calls, which then do nothing, so one code path serves a laptop and a pod.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

logger = logging.getLogger(__name__)


def cluster_environment(environ=None) -> Optional[str]:
  """The multi-process launcher this process runs under, if any, from the variables JAX's own cluster detection
  reads: "env" (JAX_COORDINATOR_ADDRESS), "slurm" (more than one task), "mpi" (Open MPI, more than one rank) or
  "tpu" (a multi-host TPU slice); None on a single host."""
  env = os.environ if environ is None else environ
  if env.get("JAX_COORDINATOR_ADDRESS"):
    return "env"
  if env.get("SLURM_JOB_ID") and int(env.get("SLURM_NTASKS", env.get("SLURM_NPROCS", "1")) or 1) > 1:
    return "slurm"
  if int(env.get("OMPI_COMM_WORLD_SIZE", "1") or 1) > 1:
    return "mpi"
  hosts = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
  if len(hosts) > 1 or env.get("MEGASCALE_COORDINATOR_ADDRESS"):
    return "tpu"
  return None


def initialize(cfg) -> bool:
  """Starts `jax.distributed` for a multi-process run; returns whether it did. Call before anything touches devices.

  cfg (the run config's `distributed` section): `coordinator_address` "host:port" with `num_processes` and
  `process_id` starts it explicitly; else, with `auto` on, a launcher found by `cluster_environment` (SLURM, Open
  MPI, a TPU slice, JAX_COORDINATOR_ADDRESS) lets JAX read its own settings from the environment.
  """
  if cfg.coordinator_address:
    if cfg.num_processes < 1 or not 0 <= cfg.process_id < cfg.num_processes:
      raise ValueError(f"distributed.process_id must be in [0, distributed.num_processes), got process_id="
                       f"{cfg.process_id} with num_processes={cfg.num_processes}")
    jax.distributed.initialize(cfg.coordinator_address, num_processes=cfg.num_processes, process_id=cfg.process_id)
  elif cfg.auto and cluster_environment() is not None:
    jax.distributed.initialize()
  else:
    return False
  logger.info("process %d of %d, %d local devices of %d", jax.process_index(), jax.process_count(),
              jax.local_device_count(), jax.device_count())
  return True


def is_primary() -> bool:
  """Process 0: the one that writes logs, plots and run records."""
  return jax.process_index() == 0


def share(n: int, what: str, even: bool = True) -> slice:
  """This process's contiguous share of `n` items: tasks of an iteration and rows of a batch (`even`: every
  process must hold as many), or problems of the validation panel (shares differ by at most one)."""
  procs, me = jax.process_count(), jax.process_index()
  if even and n % procs:
    raise ValueError(f"{what}={n} must be a multiple of the number of processes ({procs}): each process plays an "
                     f"equal share")
  return slice(me * n // procs, (me + 1) * n // procs)


def local_size(n: int, field: str) -> int:
  """This process's share of a global batch size (all of it on one host)."""
  mine = share(n, field)
  return mine.stop - mine.start


def shape_agreement() -> Optional[Callable[[Sequence[int]], Tuple[int, ...]]]:
  """`make_minibatches`' `agree`: `global_max` over processes; None (nothing to agree on) on one host."""
  return global_max if jax.process_count() > 1 else None


def allgather(obj: Any) -> List[Any]:
  """Every process's JSON-able `obj`, in process order ([obj] in a single-process run)."""
  if jax.process_count() == 1:
    return [obj]
  data = np.frombuffer(json.dumps(obj).encode(), np.uint8)
  sizes = np.asarray(multihost_utils.process_allgather(np.asarray([data.size], np.int64))).reshape(-1)
  padded = np.zeros(int(sizes.max()), np.uint8)
  padded[:data.size] = data
  every = np.asarray(multihost_utils.process_allgather(padded))
  return [json.loads(bytes(every[i, :sizes[i]])) for i in range(len(sizes))]


def offset(n: int) -> int:
  """Where this process's `n` items start in the run's whole list, the processes' lists laid end to end in process
  order (0 in a single-process run): numbers an item keeps whichever process holds it (a sample's skill draw)."""
  return int(sum(allgather(int(n))[:jax.process_index()]))


def sum_over_processes(values: Dict[str, Sequence[float]]) -> Dict[str, np.ndarray]:
  """{name: element-wise sum over processes of `values[name]`}; a name one process lacks counts as zeros there.
  Metrics whose sums, counts and squares add up (a mean and std over every process's tokens) go through this."""
  parts = allgather({k: [float(x) for x in np.ravel(v)] for k, v in values.items()})
  out: Dict[str, np.ndarray] = {}
  for part in parts:
    for k, v in part.items():
      out[k] = out[k] + np.asarray(v) if k in out else np.asarray(v, np.float64)
  return out


def totals(values: Sequence[float]) -> List[float]:
  """`values` summed element-wise over processes (themselves in a single-process run)."""
  return list(sum_over_processes({"v": values})["v"])


def global_max(values: Sequence[int]) -> Tuple[int, ...]:
  """Element-wise maximum of `values` over processes: the shape every process's share of a batch is padded to."""
  return tuple(int(v) for v in np.max(np.asarray(allgather([int(v) for v in values])), axis=0))


def local_mesh(mesh: Mesh) -> Mesh:
  """The block of `mesh` made of this process's devices, with the same axis names: where it samples its episodes.

  `make_mesh` lays `jax.devices()` (ordered by process) out row-major, so a process's devices form a block whenever
  the axes inside a host (the trailing ones) divide its device count: (data over hosts, fsdp/tensor within) does.
  """
  if jax.process_count() == 1:
    return mesh
  mine = np.vectorize(lambda d: d.process_index == jax.process_index())(mesh.devices)
  where = np.argwhere(mine)
  block = mesh.devices[tuple(slice(lo, hi + 1) for lo, hi in zip(where.min(0), where.max(0)))]
  if block.size != mine.sum():
    raise ValueError(f"mesh_shape {tuple(mesh.devices.shape)}: process {jax.process_index()}'s devices do not form a "
                     f"block of the mesh; put the axis that spans hosts first (data), with fsdp x tensor dividing the "
                     f"{jax.local_device_count()} devices of a host")
  return Mesh(block, mesh.axis_names)


def to_local(tree, local: Mesh):
  """The global arrays of `tree` as arrays on this process's `local` mesh, with the same PartitionSpecs.

  A mesh axis that spans processes cannot shard a process-local array: arrays sharded over one are first gathered
  over it (one all-gather on the global mesh); then each local array is assembled from the process's own shards,
  without a copy. So with data over hosts and fsdp/tensor within them, this costs nothing.
  """
  if jax.process_count() == 1:
    return tree
  leaves, treedef = jax.tree.flatten(tree)
  mesh = leaves[0].sharding.mesh
  spanning = {a for a in mesh.axis_names if mesh.shape[a] != local.shape[a]}

  def kept(spec: P) -> P:
    def entry(e):
      names = (e,) if isinstance(e, str) else tuple(e or ())
      names = tuple(n for n in names if n not in spanning)
      return None if not names else names[0] if len(names) == 1 else names
    return P(*(entry(e) for e in spec))

  specs = [kept(x.sharding.spec) for x in leaves]
  gather = [i for i, (x, s) in enumerate(zip(leaves, specs)) if s != x.sharding.spec]
  if gather:
    gathered = jax.jit(lambda xs: xs, out_shardings=[NamedSharding(mesh, specs[i]) for i in gather])(
        [leaves[i] for i in gather])
    for i, x in zip(gather, gathered):
      leaves[i] = x

  def assemble(x, spec):
    target = NamedSharding(local, spec)
    shards = {s.device: s.data for s in x.addressable_shards}
    return jax.make_array_from_single_device_arrays(x.shape, target,
                                                    [shards[d] for d in target.addressable_devices_indices_map(x.shape)])

  return jax.tree.unflatten(treedef, [assemble(x, s) for x, s in zip(leaves, specs)])


def put_process_rows(tree, shardings, axis: int):
  """Global arrays from every process's rows: this process's numpy arrays are its contiguous block of dimension
  `axis` (the rows its devices hold under `shardings`). A single-process run is a plain `device_put`."""
  if jax.process_count() == 1:
    return jax.device_put(tree, shardings)

  def put(x, sharding):
    shape = list(np.shape(x))
    shape[axis] *= jax.process_count()
    return jax.make_array_from_process_local_data(sharding, np.asarray(x), tuple(shape))

  return jax.tree.map(put, tree, shardings)
