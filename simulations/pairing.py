"""A simulation's kernels paired with its trace's launches (`Pairing`): uid k of a trace-driven
log is the k-th trace header, `kernel-N[-ctx_0x...].traceg`, kernel id N of that context; of a
PTX-mode log, the trace's k-th launch in the API's order, as Accel-Sim's own scripts pair them;
every pair's kernel name is checked. ingest/simulations.py reads the log and stores the pairs."""

from collections.abc import Iterator
from dataclasses import dataclass

from simulations.errors import SimulationInputError
from simulations.models import SimulatedKernel, Simulation
from simulations.simlog import SimKernel, SimLog
from traces.demangle import demangle
from traces.models import Kernel, KernelContext, KernelName, Trace

# Launches looked up in the trace per query.
LOOKUP_BATCH = 5_000
# The reason of a ready simulation whose trace has no measured time (docs/decisions/0006).
NO_MEASURED_TIMES = (
    "the trace has no measured kernel times: upload an Nsight Systems export or a timing file to compare"
)


def fatal_words(log: SimLog) -> str:
    """Where and how the simulator said it stopped: `line N: <its words>` (empty if it did not)."""
    return f"line {log.fatal[0]}: {log.fatal[1]}" if log.fatal is not None else ""


@dataclass
class Launch:
    context: int
    kernel_id: int
    name_id: int
    step: int | None
    duration_ns: int | None


class Pairing:
    """The log's kernels with the trace's launches: SimulatedKernel rows, checked."""

    def __init__(self, trace: Trace, log: SimLog, clock_mhz: float):
        self.trace, self.log, self.clock = trace, log, clock_mhz
        self.contexts = list(
            KernelContext.objects.filter(trace=trace.key).order_by("index").values_list("index", "ctx")
        )
        self.names: dict[int, tuple[str, str]] = {}  # name id: (name, demangled without spaces)
        self.interrupted: list[dict] = []
        self.timed = 0  # pairs with a measured time

    def reason(self, log: SimLog) -> str | None:
        """A ready simulation's reason: the simulator's error that ended the log early."""
        if log.stopped == "error" and log.fatal is not None:
            return f"the simulator stopped at {fatal_words(log)}: only the kernels that finished are compared"
        return None

    def no_comparison_reason(self) -> str:
        """Why a ready simulation compared nothing."""
        timed = Kernel.stored.filter(trace=self.trace.key, duration_ns__isnull=False).exists()
        if not timed:
            return NO_MEASURED_TIMES
        if not self.timed:
            return "none of the simulated launches has a measured time in the trace"
        return "no simulated launch has a simulated time of its own (every one overlapped others)"

    def rows(self, simulation: Simulation) -> Iterator[SimulatedKernel]:
        launched = [kernel for kernel in self.log.in_uid_order() if kernel.name is not None]
        for kernel in self.log.kernels.values():
            if kernel.name is None and kernel.blocks:
                raise SimulationInputError(
                    f"{_at(kernel)}uid {kernel.uid} has a stat block but no launch line in the log"
                )
        pairs = self.trace_driven(launched) if self.log.headers else self.in_launch_order(launched)
        seen: dict[tuple[int, int], int] = {}
        for kernel, launch in pairs:
            self.check_name(kernel, launch)
            key = (launch.context, launch.kernel_id)
            if key in seen:
                raise SimulationInputError(
                    f"{_at(kernel)}uid {seen[key]} and uid {kernel.uid} are both paired with launch "
                    f"{self.where(launch)}"
                )
            seen[key] = kernel.uid
            if kernel.interrupted:
                self.interrupted.append(
                    {
                        "uid": kernel.uid,
                        "ctx": self.ctx(launch.context),
                        "kernel_id": launch.kernel_id,
                        "name": kernel.name,
                        "trace_file": kernel.trace_file,
                    }
                )
                continue
            if launch.duration_ns is not None:
                self.timed += 1
            cycles = None if kernel.overlapped else kernel.sim_cycles
            yield SimulatedKernel(
                simulation=simulation,
                trace_key=self.trace.key,
                context=launch.context,
                kernel_id=launch.kernel_id,
                uid=kernel.uid,
                kernel_name_id=launch.name_id,
                step=launch.step,
                measured_ns=launch.duration_ns,
                sim_cycles=cycles,
                sim_insn=None if kernel.overlapped else kernel.sim_insn,
                sim_ns=None if cycles is None else cycles * 1000 / self.clock,
                overlapped=kernel.overlapped,
            )

    def trace_driven(self, launched: list[SimKernel]) -> Iterator[tuple[SimKernel, Launch]]:
        """uid k: the launch its trace header names (kernel-N of its context)."""
        for start in range(0, len(launched), LOOKUP_BATCH):
            batch = launched[start : start + LOOKUP_BATCH]
            wanted: dict[int, list[int]] = {}
            for kernel in batch:
                wanted.setdefault(self.context_of(kernel), []).append(kernel.kernel_id)
            found = {}
            for context, ids in wanted.items():
                for launch in self.launches(
                    Kernel.stored.filter(trace=self.trace.key, context=context, kernel_id__in=ids)
                ):
                    found[launch.context, launch.kernel_id] = launch
            for kernel in batch:
                launch = found.get((self.context_of(kernel), kernel.kernel_id))
                if launch is None:
                    raise SimulationInputError(
                        f"{_at(kernel)}uid {kernel.uid} ({kernel.trace_file}): the trace has no launch with kernel id "
                        f"{kernel.kernel_id}{' in context ' + kernel.ctx if kernel.ctx else ''}"
                    )
                yield kernel, launch

    def in_launch_order(self, launched: list[SimKernel]) -> Iterator[tuple[SimKernel, Launch]]:
        """PTX mode: uid k, the trace's k-th launch (Accel-Sim's positional pairing)."""
        ordered = Kernel.stored.filter(trace=self.trace.key).order_by("context", "kernel_id")
        launches = self.launches(ordered)
        position = 0
        launch = None
        for kernel in launched:
            while position < kernel.uid:
                launch = next(launches, None)
                position += 1
                if launch is None:
                    raise SimulationInputError(
                        f"{_at(kernel)}uid {kernel.uid} ({kernel.name}): the trace has only {position - 1} launches"
                    )
            yield kernel, launch

    def launches(self, queryset) -> Iterator[Launch]:
        columns = ("context", "kernel_id", "kernel_name_id", "step", "duration_ns")
        for row in queryset.values_list(*columns).iterator(chunk_size=LOOKUP_BATCH):
            yield Launch(*row)

    def context_of(self, kernel: SimKernel) -> int:
        if kernel.ctx is None:
            if len(self.contexts) != 1:
                raise SimulationInputError(
                    f"uid {kernel.uid} ({kernel.trace_file}) names no context, and the trace has "
                    f"{len(self.contexts)}: trace-driven logs of several contexts name kernel-N-ctx_0x... files"
                )
            return self.contexts[0][0]
        matches = [
            index for index, ctx in self.contexts if ctx is not None and ctx.lower() == kernel.ctx.lower()
        ]
        if len(matches) != 1:
            problem = "no" if not matches else f"{len(matches)} (one per device)"
            raise SimulationInputError(
                f"uid {kernel.uid} ({kernel.trace_file}): the trace has {problem} context {kernel.ctx}"
            )
        return matches[0]

    def check_name(self, kernel: SimKernel, launch: Launch) -> None:
        """The log's name is the launch's, as the tracer's stats file has it (mangled) or
        demangled (Accel-Sim prints the trace header's name, which newer tracers demangle)."""
        names = self.names.get(launch.name_id)
        if names is None:
            name = KernelName.objects.values_list("name", flat=True).get(pk=launch.name_id)
            names = self.names[launch.name_id] = (name, _spaceless(demangle(name)))
        if kernel.name != names[0] and _spaceless(kernel.name) != names[1]:
            source = kernel.trace_file or "launch order"
            raise SimulationInputError(
                f"{_at(kernel)}uid {kernel.uid} ({source}): the log simulates {kernel.name!r}, "
                f"but the trace's launch {self.where(launch)} is {names[0]!r}"
            )

    def where(self, launch: Launch) -> str:
        ctx = self.ctx(launch.context)
        return f"{ctx}/{launch.kernel_id}" if ctx else str(launch.kernel_id)

    def ctx(self, context: int) -> str | None:
        return dict(self.contexts).get(context)


def _at(kernel: SimKernel) -> str:
    """`line N: `, the log's line that first named the kernel."""
    return "" if kernel.line is None else f"line {kernel.line}: "


def _spaceless(name: str) -> str:
    """A demangled name without its spaces: demanglers differ in `> >` and `, `."""
    return "".join(name.split())
