"""The simulator's stdout written line by line (docs/formats.md#the-simulators-log): the banner
and the option dump, then per kernel the stat block `gpu_print_stat` prints, with the cumulative
counters it carries from block to block, and its `print_simulation_time` footer.

`SimBuild` and `SimConfig` are what the log is written from: a build's banner lines and how far
its cycles are from the hardware, a tested config's values.
"""

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class SimBuild:
    """An Accel-Sim build, and how far its cycles are from the hardware (synthetic)."""

    accelsim: str  # what `Accel-Sim [build ...]` prints
    gpgpusim: str  # what GPGPU-Sim's banner prints in `[build ...]`
    prefill_bias: float  # mean of simulated/measured - 1 for prefill kernels
    decode_bias: float  # the same for decode kernels
    spread: float  # standard deviation of the per-kernel error around the bias


@dataclass(frozen=True)
class SimConfig:
    """The parts of an Accel-Sim tested config that the log shows."""

    name: str
    capability: int
    clusters: int
    mem_channels: int
    clock_domains: str  # core:icnt:l2:dram, MHz, as the config file writes it
    shmem_size: int
    dram_timing: str

    @property
    def core_clock_mhz(self) -> float:
        return float(self.clock_domains.split(":")[0])

    @property
    def clocks_mhz(self) -> list[float]:
        return [float(value) for value in self.clock_domains.split(":")]


DRAM_TIMING_HELP = {
    "nbk": "number of banks",
    "CCD": "column to column delay",
    "RRD": "minimal delay between activation of rows in different banks",
    "RCD": "row to column delay",
    "RAS": "time needed to activate row",
    "RP": "time needed to precharge (deactivate) row",
    "RC": "row cycle time",
    "CDLR": "switching from write to read (changes tWTR)",
    "WR": "last data-in to row precharge",
    "CL": "CAS latency",
    "WL": "Write latency",
    "nbkgrp": "number of bank groups",
    "CCDL": "column to column delay between accesses to different bank groups",
    "RTPL": "read to precharge delay between accesses to different bank groups",
}


class LogWriter:
    """The log's lines, and the cumulative counters the stat blocks print."""

    def __init__(self, config: SimConfig):
        self.config = config
        self.parts: list[str] = []
        self.size = 0
        self.blocks = 0
        self.tot_cycle = 0
        self.tot_insn = 0
        self.tot_cta = 0
        self.seconds = 0
        self.block_ends: list[int] = []  # byte offset after each block's footer
        self.block_uids: list[list[int]] = []
        self.block_totals: list[int] = []
        self.cores = config.clusters
        self.banks = config.mem_channels * 2
        self.l1d = [[0, 0, 0] for _ in range(self.cores)]  # access, miss, reservation fails
        self.l2 = [[0, 0] for _ in range(self.banks)]
        self.counters: dict[str, int] = {}

    def line(self, text: str) -> None:
        data = text + "\n"
        self.parts.append(data)
        self.size += len(data.encode())

    def bytes(self) -> bytes:
        return "".join(self.parts).encode()

    def banner(self, build: SimBuild, dump: list[tuple[str, str, str]]) -> None:
        # main.cc prints the Accel-Sim line without a newline; GPGPU-Sim's banner starts with two.
        self.line(f"Accel-Sim [build {build.accelsim}]")
        self.line("")
        self.line(f"        *** GPGPU-Sim Simulator Version 4.2.0  [build {build.gpgpusim}] ***")
        self.line("")
        self.line("")
        self.line("GPGPU-Sim: Configuration options:")
        self.line("")
        for name, value, help_text in dump:
            self.line(f"-{name:<20} {value:>20} # {help_text}")
        self.line("DRAM Timing Options:")
        timing = dict(item.split("=") for item in self.config.dram_timing.split(":"))
        for key, help_text in DRAM_TIMING_HELP.items():
            self.line(f"{key:<20} {timing[key]:>20} # {help_text}")
        self.line(f"Total number of memory sub partition = {self.banks}")
        self.line("addr_dec_mask[CHIP]  = 0000000000000000 \thigh:64 low:0")
        self.line("addr_dec_mask[BK]    = 0000000000007080 \thigh:15 low:7")
        self.line("addr_dec_mask[ROW]   = 000000000fff8000 \thigh:28 low:15")
        self.line("addr_dec_mask[COL]   = 0000000000000f7f \thigh:12 low:0")
        self.line("addr_dec_mask[BURST] = 000000000000001f \thigh:5 low:0")
        self.line("sub_partition_id_mask = 0000000000000080")
        clocks = self.config.clocks_mhz
        self.line("GPGPU-Sim uArch: clock freqs: " + ":".join(f"{mhz * 1e6:.6f}" for mhz in clocks))
        self.line("GPGPU-Sim uArch: clock periods: " + ":".join(f"{1 / (mhz * 1e6):.20f}" for mhz in clocks))
        self.line("*** Initializing Memory Statistics ***")
        self.line("GPGPU-Sim uArch: performance model initialization complete.")

    def add(self, name: str, value: int) -> int:
        self.counters[name] = self.counters.get(name, 0) + value
        return self.counters[name]

    def block(self, kernels: list[tuple[int, str, int]], cycles: int, insn: int, ctas: int) -> None:
        """One `gpu_print_stat` block and its `print_simulation_time` footer."""
        rng = random.Random(f"{self.blocks}:{cycles}:{insn}")
        self.tot_cycle += cycles
        self.tot_insn += insn
        self.tot_cta += ctas
        self.line("kernel_name = " + "".join(f"{name} " for _, name, _ in kernels))
        self.line("kernel_launch_uid = " + "".join(f"{uid} " for uid, _, _ in kernels))
        self.line(f"kernel_stream_id = {kernels[0][2]}")
        self.line(f"gpu_sim_cycle = {cycles}")
        self.line(f"gpu_sim_insn = {insn}")
        self.line(f"gpu_ipc = {insn / cycles:12.4f}")
        self.line(f"gpu_tot_sim_cycle = {self.tot_cycle}")
        self.line(f"gpu_tot_sim_insn = {self.tot_insn}")
        self.line(f"gpu_tot_ipc = {self.tot_insn / self.tot_cycle:12.4f}")
        self.line(f"gpu_tot_issued_cta = {self.tot_cta}")
        occupancy = min(95.0, 8 + 80 * min(1.0, ctas / (4 * self.cores)) * rng.uniform(0.7, 1.0))
        total_occ = self.add("occ_weighted", int(occupancy * cycles)) / self.tot_cycle
        self.line(f"gpu_occupancy = {occupancy:.4f}% ")
        self.line(f"gpu_tot_occupancy = {total_occ:.4f}% ")
        self.line("max_total_param_size = 0")
        self.line(f"gpu_stall_dramfull = {self.add('stall_dramfull', rng.randrange(0, cycles // 4 + 1))}")
        self.line(f"gpu_stall_icnt2sh    = {self.add('stall_icnt2sh', rng.randrange(0, cycles // 8 + 1))}")
        accesses = max(32, insn // rng.randrange(40, 90))
        replies = accesses * 3 // 4
        parallel = replies / cycles
        total_parallel = self.add("replies", replies) / self.tot_cycle
        self.line(f"partiton_level_parallism = {parallel:12.4f}")
        self.line(f"partiton_level_parallism_total  = {total_parallel:12.4f}")
        self.line(f"partiton_level_parallism_util = {parallel * 1.6 + 1:12.4f}")
        self.line(f"partiton_level_parallism_util_total  = {total_parallel * 1.6 + 1:12.4f}")
        core_hz = self.config.core_clock_mhz * 1e6
        self.line(f"L2_BW  = {replies * 32 / (cycles / core_hz) / 1e9:12.4f} GB/Sec")
        self.line(
            f"L2_BW_total  = {self.counters['replies'] * 32 / (self.tot_cycle / core_hz) / 1e9:12.4f} GB/Sec"
        )
        # The simulator runs at some thousands of cycles a second of wall time.
        seconds = max(1, cycles // rng.randrange(1500, 4000))
        self.seconds += seconds
        self.line(f"gpu_total_sim_rate={self.tot_insn // max(1, self.seconds)}")
        self._cache_stats(accesses, ctas, rng)
        self._shader_stats(insn, accesses, rng)
        self._l2_stats(replies, rng)
        self.line("")
        self.line(f"icnt_total_pkts_mem_to_simt={self.add('pkts_mem_to_simt', replies)}")
        self.line(f"icnt_total_pkts_simt_to_mem={self.add('pkts_simt_to_mem', accesses)}")
        self._interconnect(accesses, replies, cycles)
        self.line("")
        self.line("")
        days, rest = divmod(self.seconds, 86400)
        hours, rest = divmod(rest, 3600)
        minutes, secs = divmod(rest, 60)
        self.line(
            f"gpgpu_simulation_time = {days} days, {hours} hrs, {minutes} min, {secs} sec ({self.seconds} sec)"
        )
        self.line(f"gpgpu_simulation_rate = {self.tot_insn // self.seconds} (inst/sec)")
        self.line(f"gpgpu_simulation_rate = {self.tot_cycle // self.seconds} (cycle/sec)")
        self.line(f"gpgpu_silicon_slowdown = {int(core_hz // max(1, self.tot_cycle // self.seconds))}x")
        self.blocks += 1
        self.block_ends.append(self.size)
        self.block_uids.append([uid for uid, _, _ in kernels])
        self.block_totals.append(self.tot_cycle)

    def _cache_stats(self, accesses: int, ctas: int, rng: random.Random) -> None:
        self.line("")
        self.line("========= Core cache stats =========")
        self.line("L1I_cache:")
        for name in ("accesses", "misses", "pending_hits", "reservation_fails"):
            self.line(f"\tL1I_total_cache_{name} = 0")
        self.line("L1D_cache:")
        busy = max(1, min(self.cores, ctas))
        miss_rate = rng.uniform(0.3, 0.8)
        for core in range(busy):
            share = accesses // busy
            self.l1d[core][0] += share
            self.l1d[core][1] += int(share * miss_rate)
            self.l1d[core][2] += rng.randrange(0, share // 8 + 1)
        for core, (access, miss, fails) in enumerate(self.l1d):
            rate = f"{miss / access:.3f}" if access else "-nan"
            self.line(
                f"\tL1D_cache_core[{core}]: Access = {access}, Miss = {miss}, Miss_rate = {rate}, "
                f"Pending_hits = 0, Reservation_fails = {fails}"
            )
        access = sum(core[0] for core in self.l1d)
        miss = sum(core[1] for core in self.l1d)
        fails = sum(core[2] for core in self.l1d)
        self.line(f"\tL1D_total_cache_accesses = {access}")
        self.line(f"\tL1D_total_cache_misses = {miss}")
        self.line(f"\tL1D_total_cache_miss_rate = {miss / max(1, access):.4f}")
        self.line("\tL1D_total_cache_pending_hits = 0")
        self.line(f"\tL1D_total_cache_reservation_fails = {fails}")
        self.line(f"\tL1D_cache_data_port_util = {rng.uniform(0.01, 0.2):.3f}")
        self.line(f"\tL1D_cache_fill_port_util = {rng.uniform(0.01, 0.2):.3f}")
        for cache in ("L1C", "L1T"):
            self.line(f"{cache}_cache:")
            for name in ("accesses", "misses", "pending_hits", "reservation_fails"):
                self.line(f"\t{cache}_total_cache_{name} = 0")
        self.line("")
        self.line("Total_core_cache_stats:")
        self._breakdown("Total_core_cache_stats_breakdown", access, miss, fails)
        self.line("")
        self.line("Total_core_cache_fail_stats:")
        self.line(f"\tTotal_core_cache_fail_stats_breakdown[GLOBAL_ACC_R][MISS_QUEUE_FULL] = {fails}")

    def _breakdown(self, prefix: str, access: int, miss: int, fails: int) -> None:
        reads, writes = access * 2 // 3, access - access * 2 // 3
        values = {
            ("GLOBAL_ACC_R", "HIT"): reads - miss * 2 // 3,
            ("GLOBAL_ACC_R", "MISS"): miss * 2 // 3 // 4,
            ("GLOBAL_ACC_R", "RESERVATION_FAIL"): fails,
            ("GLOBAL_ACC_R", "SECTOR_MISS"): miss * 2 // 3 - miss * 2 // 3 // 4,
            ("GLOBAL_ACC_W", "HIT"): writes - (miss - miss * 2 // 3),
            ("GLOBAL_ACC_W", "MISS"): miss - miss * 2 // 3,
        }
        for access_type in (
            "GLOBAL_ACC_R",
            "LOCAL_ACC_R",
            "CONST_ACC_R",
            "TEXTURE_ACC_R",
            "GLOBAL_ACC_W",
            "LOCAL_ACC_W",
        ):
            for outcome in ("HIT", "HIT_RESERVED", "MISS", "RESERVATION_FAIL", "SECTOR_MISS", "MSHR_HIT"):
                self.line(
                    f"\t{prefix}[{access_type}][{outcome}] = {max(0, values.get((access_type, outcome), 0))}"
                )
        self.line(f"\t{prefix}[GLOBAL_ACC_R][TOTAL_ACCESS] = {reads}")
        self.line(f"\t{prefix}[GLOBAL_ACC_W][TOTAL_ACCESS] = {writes}")

    def _shader_stats(self, insn: int, accesses: int, rng: random.Random) -> None:
        threads = self.add("thrd_icount", insn)
        self.line(f"gpgpu_n_tot_thrd_icount = {threads}")
        self.line(f"gpgpu_n_tot_w_icount = {self.add('w_icount', insn // 30)}")
        self.line(f"gpgpu_n_stall_shd_mem = {self.add('stall_shd_mem', rng.randrange(0, accesses + 1))}")
        self.line("gpgpu_n_mem_read_local = 0")
        self.line("gpgpu_n_mem_write_local = 0")
        self.line(f"gpgpu_n_mem_read_global = {self.add('read_global', accesses * 2 // 3)}")
        self.line(f"gpgpu_n_mem_write_global = {self.add('write_global', accesses - accesses * 2 // 3)}")
        self.line("gpgpu_n_mem_texture = 0")
        self.line("gpgpu_n_mem_const = 0")
        self.line(f"gpgpu_n_load_insn  = {self.add('load_insn', insn // 9)}")
        self.line(f"gpgpu_n_store_insn = {self.add('store_insn', insn // 27)}")
        self.line(f"gpgpu_n_shmem_insn = {self.add('shmem_insn', insn // 7)}")
        self.line("gpgpu_n_sstarr_insn = 0")
        self.line("gpgpu_n_tex_insn = 0")
        self.line(f"gpgpu_n_const_mem_insn = {self.add('const_insn', insn // 50)}")
        self.line(f"gpgpu_n_param_mem_insn = {self.add('param_insn', insn // 60)}")
        self.line(
            f"gpgpu_n_shmem_bkconflict = {self.add('bkconflict', rng.randrange(0, accesses // 10 + 1))}"
        )
        self.line("gpgpu_n_cache_bkconflict = 0")
        self.line("gpgpu_n_intrawarp_mshr_merge = 0")
        self.line("gpgpu_n_cmem_portconflict = 0")
        self.line("gpu_reg_bank_conflict_stalls = 0")
        self.line("Warp Occupancy Distribution:")
        self.line(
            f"Stall:{self.add('warp_stall', rng.randrange(100, 5000))}\tW0_Idle:{self.add('w0_idle', rng.randrange(1000, 90000))}"
            f"\tW0_Scoreboard:{self.add('w0_score', rng.randrange(1000, 90000))}\tW32:{self.add('w32', insn // 32)}"
        )
        reads = self.counters["read_global"]
        self.line(f"traffic_breakdown_coretomem[GLOBAL_ACC_R] = {reads * 8} {{8:{reads},}}")
        self.line(f"traffic_breakdown_memtocore[GLOBAL_ACC_R] = {reads * 40} {{40:{reads},}}")
        self.counters["maxmflatency"] = max(self.counters.get("maxmflatency", 0), rng.randrange(400, 900))
        self.line(f"maxmflatency = {self.counters['maxmflatency']} ")
        self.line(f"averagemflatency = {rng.randrange(250, 450)} ")
        self.line(f"total dram reads = {self.add('dram_reads', accesses // 3)}")
        self.line(f"total dram writes = {self.add('dram_writes', accesses // 9)}")

    def _l2_stats(self, replies: int, rng: random.Random) -> None:
        self.line("")
        self.line("========= L2 cache stats =========")
        per_bank = replies // self.banks
        miss_rate = rng.uniform(0.1, 0.5)
        for bank in range(self.banks):
            share = per_bank + (1 if bank < replies % self.banks else 0)
            self.l2[bank][0] += share
            self.l2[bank][1] += int(share * miss_rate)
        for bank, (access, miss) in enumerate(self.l2):
            rate = f"{miss / access:.3f}" if access else "-nan"
            self.line(
                f"L2_cache_bank[{bank}]: Access = {access}, Miss = {miss}, Miss_rate = {rate}, "
                f"Pending_hits = 0, Reservation_fails = 0"
            )
        access = sum(bank[0] for bank in self.l2)
        miss = sum(bank[1] for bank in self.l2)
        self.line(f"L2_total_cache_accesses = {access}")
        self.line(f"L2_total_cache_misses = {miss}")
        self.line(f"L2_total_cache_miss_rate = {miss / max(1, access):.4f}")
        self.line("L2_total_cache_pending_hits = 0")
        self.line("L2_total_cache_reservation_fails = 0")
        self.line("L2_total_cache_breakdown:")
        self._breakdown("L2_cache_stats_breakdown", access, miss, 0)
        self.line("L2_total_cache_reservation_fail_breakdown:")
        self.line(f"L2_cache_data_port_util = {rng.uniform(0.01, 0.1):.3f}")
        self.line(f"L2_cache_fill_port_util = {rng.uniform(0.01, 0.1):.3f}")

    def _interconnect(self, accesses: int, replies: int, cycles: int) -> None:
        self.line("----------------------------Interconnect-DETAILS--------------------------------")
        for network, packets in (("Req", accesses), ("Reply", replies)):
            self.line(f"{network}_Network_injected_packets_num = {packets}")
            self.line(f"{network}_Network_cycles = {cycles}")
            self.line(f"{network}_Network_injected_packets_per_cycle = {packets / cycles:12.4f} ")
            self.line(f"{network}_Network_conflicts_per_cycle = {packets / cycles / 3:12.4f}")
            self.line(f"{network}_Bank_Level_Parallism = {1 + packets / cycles:12.4f}")
            self.line(f"{network}_Network_in_buffer_full_per_cycle = {0:12.4f}")
            self.line(f"{network}_Network_out_buffer_full_per_cycle = {0:12.4f}")
            if network == "Req":
                self.line("")
        self.line("----------------------------END-of-Interconnect-DETAILS-------------------------")
