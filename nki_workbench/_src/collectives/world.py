"""The ranks' meeting point: lock-step exchange at collectives, with bounded waits.

One :class:`World` serves one multi-rank simulation. Every participant (a rank, and within it
an SPMD program id ``pid``) runs in its own thread. Collectives are matched by order: the k-th
collective a participant executes meets the k-th collective of every other member of its
replica group (same ``pid``); they must agree on the opcode, the attributes and the source
shapes and dtypes, else the error names two ranks and their kernel lines: the first pair by
rank of the whole meeting that differs, whatever order the threads arrived in. Point-to-point
``send`` is buffered (it returns at once); ``recv`` waits for the oldest unreceived message
from its peer.

Nothing waits forever. A waiting participant fails as soon as the wait cannot end: a rank it
needs has finished the kernel, every live participant is itself waiting on something that
cannot arrive (a deadlock: the error lists where each one waits), another participant failed,
or ``timeout`` seconds passed. When every rank has finished, a message that was sent and never
received is an error naming the sender, the receiver and the send's line.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from ..errors import NkiError
from .kinds import group_of
from .semantics import compute

__all__ = ["World", "Arrival", "Aborted"]


class Aborted(Exception):
    """Raised in a participant because another one failed first (the runner reports that one)."""


class Arrival:
    """One participant at one collective or point-to-point instruction.

    Attributes:
        rank: global rank.
        pid: SPMD program id within the rank.
        op: IR opcode.
        api: display name (``all_reduce``...).
        attrs: instruction attributes (dict).
        loc: kernel ``file:line``.
        vals: source values (one array per source).
        out_shapes: destination shapes.
        group: replica group (global ranks) or, for send/recv, ``(rank, peer)``.
    """

    __slots__ = ("rank", "pid", "op", "api", "attrs", "loc", "vals", "out_shapes", "group")

    def __init__(self, rank, pid, op, api, attrs, loc, vals, out_shapes):
        self.rank, self.pid, self.op, self.api = rank, pid, op, api
        self.attrs, self.loc, self.vals, self.out_shapes = attrs, loc, vals, out_shapes
        self.group = ()

    def where(self) -> str:
        """``api at file:line``."""
        return f"{self.api} at {self.loc}" if self.loc else self.api


def _pid_text(pid) -> str:
    return "" if not pid or all(p == 0 for p in pid) and len(pid) == 1 else f" program {list(pid)}"


class World:
    """Rendezvous of ``nranks`` ranks (each running the SPMD programs ``pids``).

    Args:
        nranks: number of ranks.
        groups: default replica groups (the launch topology); ``None`` = all ranks in one group.
        pids: the SPMD program ids every rank runs.
        timeout: seconds one wait may last.
    """

    def __init__(self, nranks: int, groups, pids, timeout: float):
        self.nranks = nranks
        self.groups = groups if groups is not None else (tuple(range(nranks)),)
        self.pids = [tuple(int(x) for x in p) for p in pids]
        self.timeout = float(timeout)
        self.cond = threading.Condition()
        self.seq: dict = {}        # (rank, pid) -> index of its next collective
        self.arrivals: dict = {}   # (pid, k) -> {rank: Arrival}
        self.results: dict = {}    # (rank, pid, k) -> list of arrays/None
        self.mail: dict = {}       # (pid, src, dst) -> deque of Arrival
        self.waiting: dict = {}    # (rank, pid) -> (description, ready())
        self.done: set = set()
        self.failed: BaseException | None = None

    # ------------------------------------------------------------------ failure
    def fail(self, exc: BaseException) -> BaseException:
        """Record the first failure and wake every waiter (they raise :class:`Aborted`)."""
        with self.cond:
            if self.failed is None:
                self.failed = exc
            self.cond.notify_all()
        return exc

    def mark_done(self, rank: int) -> None:
        """Rank ``rank`` finished the kernel."""
        with self.cond:
            self.done.add(rank)
            self.cond.notify_all()

    def check_finished(self) -> None:
        """After every rank finished: messages nobody received are an error."""
        for (pid, src, dst), q in sorted(self.mail.items()):
            if q:
                a = q[0]
                raise NkiError("wb_collective_unmatched_send",
                               f"rank {src}{_pid_text(pid)} sent {len(q)} message(s) to rank "
                               f"{dst} ({a.where()}) that rank {dst} never received", a.loc,
                               f"add a matching nccl.recv(..., peer_id={src}) on rank {dst}, "
                               "or remove the send")

    # ------------------------------------------------------------------ exchange
    def collective(self, arr: Arrival, groups) -> list:
        """Meet the other members of ``arr``'s replica group; returns this rank's results."""
        groups = groups if groups is not None else self.groups
        arr.group = group_of(arr.rank, groups, arr.api, arr.loc, self.nranks)
        me = (arr.rank, arr.pid)
        with self.cond:
            self._check_failed()
            k = self.seq.get(me, 0)
            self.seq[me] = k + 1
            slot = self.arrivals.setdefault((arr.pid, k), {})
            odd = next((e for e in (self._disagree(arr, other, k) for other in slot.values()
                                    if other.rank in arr.group or arr.rank in other.group)
                        if e is not None), None)
            slot[arr.rank] = arr
            if odd is not None:
                raise self.fail(self._disagreeing(arr, k, slot, odd))
            if all(m in slot for m in arr.group):
                from .kinds import kind_of
                res = compute(kind_of(arr.op).name, arr.group, slot, arr.attrs, arr.api)
                for m in arr.group:
                    self.results[(m, arr.pid, k)] = res[m]
                    del slot[m]
                if not slot:
                    del self.arrivals[(arr.pid, k)]
                self.cond.notify_all()
            key = (arr.rank, arr.pid, k)
            missing = [m for m in arr.group if m not in slot and key not in self.results]
            desc = f"rank {arr.rank}{_pid_text(arr.pid)} waits at {arr.where()} (collective " \
                   f"#{k} of group {list(arr.group)})"
            return self._wait(me, desc, lambda: key in self.results,
                              lambda: self.results.pop(key), arr, arr.group,
                              lambda m: f"rank {m} finished the kernel without reaching "
                                        f"{arr.where()}, where rank {arr.rank} waits "
                                        f"(collective #{k} of group {list(arr.group)})",
                              missing)

    def send(self, arr: Arrival, peer: int, groups) -> None:
        """Buffer ``arr.vals`` for rank ``peer`` (returns at once)."""
        self._check_peer(arr, peer, groups)
        with self.cond:
            self._check_failed()
            self.mail.setdefault((arr.pid, arr.rank, peer), deque()).append(arr)
            self.cond.notify_all()

    def recv(self, arr: Arrival, peer: int, groups) -> list:
        """Wait for the oldest message from rank ``peer``; returns its values."""
        self._check_peer(arr, peer, groups)
        box = (arr.pid, peer, arr.rank)
        with self.cond:
            self._check_failed()
            desc = f"rank {arr.rank}{_pid_text(arr.pid)} waits at {arr.where()} for data from " \
                   f"rank {peer}"
            msg = self._wait((arr.rank, arr.pid), desc, lambda: bool(self.mail.get(box)),
                             lambda: self.mail[box].popleft(), arr, (peer,),
                             lambda m: f"rank {arr.rank} waits at {arr.where()} for data from "
                                       f"rank {m}, but rank {m} finished the kernel without "
                                       f"sending it", [peer])
        if len(msg.vals) != len(arr.out_shapes):
            raise self.fail(NkiError(
                "wb_collective_shape",
                f"rank {peer} sent {len(msg.vals)} tensor(s) ({msg.where()}) but rank "
                f"{arr.rank} receives {len(arr.out_shapes)} ({arr.where()})", arr.loc))
        for j, (v, want) in enumerate(zip(msg.vals, arr.out_shapes, strict=True)):
            if tuple(v.shape) != tuple(want):
                raise self.fail(NkiError(
                    "wb_collective_shape",
                    f"rank {peer} sent srcs[{j}] of shape {list(v.shape)} ({msg.where()}) but "
                    f"rank {arr.rank} receives into dsts[{j}] of shape {list(want)} "
                    f"({arr.where()})", arr.loc, "send and receive tensors of the same shape"))
        return list(msg.vals)

    # ------------------------------------------------------------------ internals
    def _check_failed(self):
        if self.failed is not None:
            raise Aborted(str(self.failed))

    def _check_peer(self, arr: Arrival, peer, groups):
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < self.nranks:
            raise self.fail(NkiError(
                "wb_collective_rank_out_of_range",
                f"{arr.api} at rank {arr.rank}: peer_id={peer!r} is not a simulated rank "
                f"(ranks 0..{self.nranks - 1})", arr.loc,
                "peer_id is the global rank of the other side"))
        if groups is not None:
            g = group_of(arr.rank, groups, arr.api, arr.loc, self.nranks)
            if peer not in g:
                raise self.fail(NkiError(
                    "wb_collective_rank_not_in_group",
                    f"{arr.api} at rank {arr.rank}: peer rank {peer} is not in rank "
                    f"{arr.rank}'s replica group {list(g)}", arr.loc))
        arr.group = (arr.rank, peer)

    def _disagree(self, a: Arrival, b: Arrival, k: int) -> NkiError | None:
        """The error when ``a`` and ``b`` differ at collective #k (``None``: they agree).

        Members meeting at a collective must run the same instruction on like data.
        """
        if b.rank > a.rank:
            a, b = b, a  # why: name the lower rank first, whatever the arrival order
        if a.op != b.op or a.attrs != b.attrs:
            return NkiError(
                "wb_collective_mismatch",
                f"ranks {b.rank} and {a.rank} disagree at their collective #{k}: rank {b.rank} "
                f"runs {b.op}{_attrs(b)} at {b.loc}, rank {a.rank} runs {a.op}{_attrs(a)} at "
                f"{a.loc}", a.loc, "every member of a replica group must execute the same "
                                   "collectives in the same order")
        if len(a.vals) != len(b.vals):
            return NkiError(
                "wb_collective_shape", f"{a.api}: rank {b.rank} passes {len(b.vals)} source(s), "
                f"rank {a.rank} passes {len(a.vals)} (at {a.loc})", a.loc)
        for j, (x, y) in enumerate(zip(b.vals, a.vals, strict=True)):
            if x.shape != y.shape or x.dtype != y.dtype:
                return NkiError(
                    "wb_collective_shape",
                    f"{a.api}: ranks {b.rank} and {a.rank} pass srcs[{j}] of different shapes or "
                    f"dtypes ({list(x.shape)} {x.dtype} at {b.loc} vs {list(y.shape)} {y.dtype} "
                    f"at {a.loc})", a.loc, "every rank must pass tensors of the same shape and "
                                           "dtype to a collective")
        return None

    @staticmethod
    def _meeting(slot: dict, arr: Arrival) -> set:
        """The ranks meeting ``arr`` at its collective: its group, their groups, transitively."""
        todo, seen = [arr.rank], set()
        while todo:
            r = todo.pop()
            if r not in seen:
                seen.add(r)
                todo.extend(slot[r].group if r in slot else ())
                todo.extend(o.rank for o in slot.values() if r in o.group)
        return seen

    def _disagreeing(self, arr: Arrival, k: int, slot: dict, found: NkiError) -> NkiError:
        """The disagreement at collective #k, once every member of the meeting is there.

        ``found`` is the one ``arr`` found on arriving. Why wait: which pair an arrival finds
        depends on the threads' order; the error names the first pair (by rank) of the whole
        meeting, so it is the same in every run. Members that can never come (finished,
        deadlocked, past the timeout) leave the first pair among the others.
        """
        me, deadline = (arr.rank, arr.pid), time.monotonic() + self.timeout

        def complete():
            return all(r in slot for r in self._meeting(slot, arr))
        self.waiting[me] = (f"rank {arr.rank}{_pid_text(arr.pid)} waits at {arr.where()} "
                            f"(collective #{k}, whose members disagree)", complete)
        try:
            while not complete():
                self._check_failed()
                missing = [r for r in self._meeting(slot, arr) if r not in slot]
                left = deadline - time.monotonic()
                if left <= 0 or all(r in self.done for r in missing) or self._deadlocked():
                    break
                self.cond.wait(min(0.05, left))
        finally:
            self.waiting.pop(me, None)
        ranks = sorted(r for r in self._meeting(slot, arr) if r in slot)
        for i, lo in enumerate(ranks):
            for hi in ranks[i + 1:]:
                if hi in slot[lo].group or lo in slot[hi].group:
                    err = self._disagree(slot[lo], slot[hi], k)
                    if err is not None:
                        return err
        return found  # why: only if a group of the meeting completed meanwhile (groups differ)

    def _stuck(self, part) -> bool:
        w = self.waiting.get(part)
        return w is not None and not w[1]()

    def _deadlocked(self) -> bool:
        live = [(r, p) for r in range(self.nranks) if r not in self.done for p in self.pids]
        return bool(live) and all(self._stuck(x) for x in live)

    def _wait(self, me, desc, ready, take, arr, blockers, gone_msg, missing):
        deadline = time.monotonic() + self.timeout
        self.waiting[me] = (desc, ready)
        try:
            while not ready():
                self._check_failed()
                gone = [m for m in blockers if m in self.done and m in missing]
                if gone:
                    raise self.fail(NkiError("wb_collective_unmatched", gone_msg(gone[0]),
                                             arr.loc, _HINT))
                if self._deadlocked():
                    lines = "; ".join(self.waiting[x][0] for x in sorted(self.waiting)
                                      if self._stuck(x))
                    raise self.fail(NkiError("wb_collective_deadlock",
                                             f"the ranks can never continue: {lines}", arr.loc,
                                             _HINT))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self.fail(NkiError(
                        "wb_collective_timeout",
                        f"{desc}, and the ranks it needs ({list(blockers)}) did not arrive within "
                        f"{self.timeout:g} s", arr.loc,
                        "raise SimParams(collective_timeout=...) for slow kernels, or check that "
                        "every rank reaches the collective"))
                self.cond.wait(min(0.05, left))
            return take()
        finally:
            self.waiting.pop(me, None)


_HINT = ("every rank of a replica group must execute the same collectives in the same order; "
         "every nccl.send needs a matching nccl.recv on its peer")


def _attrs(a: Arrival) -> str:
    items = [f"{k}={v}" for k, v in sorted(a.attrs.items()) if k != "dtype"]
    return f"({', '.join(items)})" if items else ""
