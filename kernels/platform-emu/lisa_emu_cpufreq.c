// SPDX-License-Identifier: GPL-2.0
/*
 * lisa-ext platform emulation: a cpufreq driver exposing a real SoC's OPP
 * table on a guest (QEMU TCG, x86_64 or arm64) that has no frequency scaling.
 *
 * The OPP frequencies and the transition latency are copied from the SoC's
 * device tree: on x86 from the tables below, on the arm64 board from the
 * guest's own device tree (opps=dt), where lisa_ext.vboard.devicetree put
 * each cluster's operating-points-v2 table and dynamic-power-coefficient from
 * the SoC's .dtsi. It is cpufreq-dt without a clock or a regulator.
 *
 * Speed, paid (timing=faithful; the modules load with decisions): a CPU at OPP f
 * gets f / f_max of the work done per unit of time it gets at f_max. Every
 * stretch of useful (busy, not stalled) time u owes a stall of
 * u * (f_max - f) / f, paid with the vCPU halted (lisa_emu_cost.h), so that
 * (1 - f/f_max) of the busy time is taken away. It is paid in slices: a
 * per-CPU hrtimer in softirq mode fires after EMU_SLICE_NS * f/f_max of useful time and halts the vCPU for
 * what is owed, EMU_SLICE_NS * (1 - f/f_max) when the timer is on time: a
 * 1 ms slice, so that a governor's 10 ms window sees ten of them (ondemand's
 * sampling period on these tables, schedutil's rate limit is shorter still).
 * Counted as the silicon's would be:
 *   - the stall runs in softirq context on top of the running task, so the
 *     scheduler charges it to that task: its runtime grows, and PELT (with
 *     the board's frequency invariance, which scales running time by f/f_max)
 *     stays invariant, as on the SoC where the same work takes longer at a
 *     lower OPP. The kernel has no IRQ time accounting
 *     (CONFIG_IRQ_TIME_ACCOUNTING off, hence no rq->avg_irq), so schedutil
 *     sees no IRQ or RT load from it, only the task's own utilisation;
 *   - the idle loop is not involved, so ondemand's and /proc/stat's idle time
 *     do not grow (it is busy time, accounted as softirq time by the tick);
 *   - a stall ends early when need_resched() is set (a wake-up preempts the
 *     slow task at once, as on the SoC); what is left stays owed.
 * Busy and idle come from a probe on the cpu_idle tracepoint (the same one
 * the energy meter uses). The slice timer runs only while a task runs, and
 * only below f_max, so an idle CPU is never woken and a CPU at f_max costs
 * nothing: a probe on sched_switch cancels it when the CPU switches to its
 * idle task and arms it when the CPU switches back to a task. The cpu_idle
 * event would be too late to cancel it: by then the idle governor has asked
 * when the next timer fires (tick_nohz_get_sleep_length()) and, seeing a
 * slice at most 1 ms away, picked a shallow state whatever the task's sleep.
 * sched_switch is not exported to modules; the probe finds it by name
 * (for_each_kernel_tracepoint()). A busy stretch shorter than a slice
 * leaves a residue owed (up to EMU_SLICE_NS * (1 - f/f_max)); it is paid EMU_RESIDUE_DELAY_NS into
 * the CPU's next busy stretch, charged to whatever runs then (for a periodic
 * task: itself, one period later, which keeps its runtime and utilisation
 * right on average). Under TCG a timer interrupt comes late, tenths of a
 * millisecond on a quiet host and up to milliseconds on a loaded one: useful
 * time runs until the slice's interrupt is taken (a hard-mode timer of the
 * same expiry notes when), its handling up to the slice's softirq handler is
 * stall already paid (emu_speed_irq_fn() says why), and the stall's own timer
 * is programmed early by its CPU's typical lateness; what a stall really took
 * is what is paid, an overrun is credited to the next stalls.
 * At most EMU_MAX_DEBT_NS is owed; beyond, it is dropped and counted. An OPP
 * change made from another CPU (a shared policy) reaches a busy CPU by an
 * IPI (smp_call_function_single_async()), which starts its slice timer; so
 * does switching the timing to faithful. timing=decisions pays nothing: an
 * OPP change only records the new frequency and the vCPU keeps running at
 * whatever speed QEMU gives it.
 * Per CPU, /sys/kernel/debug/lisa_emu_energy/speed shows
 * "cpuN <useful_ns> <stalled_ns> <owed_ns> <dropped_ns> <stalls> <preempted>"
 * (preempted: stalls cut short by need_resched()).
 *
 * What is real: the governors' decisions (schedutil through ->fast_switch,
 * ondemand/conservative/userspace through ->target_index), the policy limits,
 * the cpu_frequency trace events (emitted by the cpufreq core for both paths),
 * the stats in policyN/stats, and (faithful) the share of each busy
 * millisecond an OPP gives the running task. What is not: the energy of an
 * OPP (priced by the model below, not measured), and the speed within a
 * slice (a task runs at the vCPU's speed, then waits).
 *
 * Power model (docs/energy.md): each policy registers an Energy Model perf
 * domain (kernel/power/energy_model.c, shown in
 * /sys/kernel/debug/energy_model/) whose power per OPP is what
 * dev_pm_opp_calc_power() (drivers/opp/of.c) computes on the SoC from its
 * device tree: P[uW] = dynamic-power-coefficient * mV^2 * MHz / 10^6. Idle
 * states are priced per CPU by name (see emu_*_idle_uw below); their powers
 * are published in /sys/kernel/debug/lisa_emu_energy/idle_mw.
 *
 * Energy meter: a hwmon device "lisa_emu_energy" with one energyN_input
 * (microjoules, monotonic) and energyN_label ("pd<first CPU>", the name the
 * Energy Model's debugfs gives the domain) per policy. Each CPU's energy is
 * integrated at every OPP change (emu_set_opp()) and at every idle entry and
 * exit, busy at its OPP's power, idle at its state's power. Idle transitions
 * come from a probe on the kernel's cpu_idle tracepoint (the instant the
 * cpuidle core and the idle loop announce them), not from a call in
 * lisa_emu_cpuidle: the two modules stay independent of each other's load
 * order and parameters, and the meter sees every idle period, whichever idle
 * driver runs. A state whose name has no power in the table (POLL, another
 * SoC's table, the default idle without a cpuidle driver) is counted busy.
 * The readings are the kernel's real residencies priced by the SoC's
 * published model, not a measurement of anything.
 *
 * Frequency invariance on arm64: the cpufreq core scales arch_freq_scale at
 * every OPP change (arch_set_freq_scale()), for this driver as for any other
 * with ->target_index/->fast_switch, and the CPU capacities from the device
 * tree's capacity-dmips-mhz are normalised by each policy's top OPP when the
 * policy is created (drivers/base/arch_topology.c): nothing to do here.
 *
 * Frequency invariance on x86: the guest's CPUs have no APERF/MPERF, so nothing scales
 * PELT utilisation by frequency. With the board-support patch
 * (kernels/patches/board/0001-x86-aperfmperf-...) this driver feeds the
 * scheduler's arch_freq_scale with cur/max of its policy at every change, as
 * the cpufreq core does on arm64, so schedutil behaves as on the SoC whose
 * table is loaded (utilisation mapped onto the maximum frequency). Without the
 * patch, or with invariance=0, schedutil maps utilisation relative to the
 * current OPP, as on any platform without invariance.
 *
 * Parameters:
 *   opps=rk3399-little[,rk3399-big]  OPP table per domain: domain k of the
 *                                    guest (x86: -smp sockets=N; arm64: the
 *                                    device tree's clusters) gets the k-th
 *                                    table, the last one repeats
 *   tables: rk3399-little, rk3399-big (rk3399.dtsi), hi3660-little
 *           (hi3660.dtsi Cortex-A53 cluster)
 *   opps=dt             each CPU's operating-points-v2 table, its
 *                       dynamic-power-coefficient and the idle powers in
 *                       lisa-ext,idle-power-uw from the device tree (the
 *                       default on arm64)
 *   domain=package|cpu  CPUs sharing a policy (default: package, i.e. a
 *                       socket on x86 and a cluster on arm64, like a
 *                       cluster sharing a clock)
 *   invariance=1|0      x86: provide frequency invariance (default 1; needs
 *                       the board-support patch)
 *   timing=faithful|decisions  pay the speed of each OPP or not (writable at
 *                       run time in /sys/module/lisa_emu_cpufreq/parameters/)
 */

#include <linux/cpu.h>
#include <linux/cpufreq.h>
#include <linux/cpuidle.h>
#include <linux/debugfs.h>
#include <linux/energy_model.h>
#include <linux/hwmon.h>
#include <linux/init.h>
#include <linux/kernel.h>
#include <linux/math64.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/of.h>
#include <linux/platform_device.h>
#include <linux/sched/clock.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/smp.h>
#include <linux/string.h>
#include <linux/sched/topology.h>
#include <linux/topology.h>
#include <linux/tracepoint.h>
#include <trace/events/power.h>

#include "lisa_emu_cost.h"

/* Power of one CPU in the idle state called @name (lisa_emu_cpuidle's names). */
struct emu_idle_power {
	const char *name;
	unsigned int uw;
};

struct emu_opp_table {
	const char *name;
	const unsigned int *khz;
	const unsigned int *mv;
	int count;
	unsigned int transition_latency_ns;
	unsigned int dynamic_power_coefficient;
	const struct emu_idle_power *idle;
	int idle_count;
};

/*
 * OPPs and voltages (first opp-microvolt value, the one
 * dev_pm_opp_get_voltage() returns): arch/arm64/boot/dts/rockchip/rk3399.dtsi
 * cluster0_opp (Cortex-A53) and cluster1_opp (Cortex-A72), linux 6.12.
 */
static const unsigned int rk3399_little_khz[] = {
	408000, 600000, 816000, 1008000, 1200000, 1416000,
};
static const unsigned int rk3399_little_mv[] = {
	825, 825, 850, 925, 1000, 1125,
};
static const unsigned int rk3399_big_khz[] = {
	408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000,
};
static const unsigned int rk3399_big_mv[] = {
	825, 825, 825, 875, 950, 1025, 1100, 1200,
};
/* arch/arm64/boot/dts/hisilicon/hi3660.dtsi cluster0_opp (Cortex-A53), linux 6.12. */
static const unsigned int hi3660_little_khz[] = {
	533000, 999000, 1402000, 1709000, 1844000,
};
static const unsigned int hi3660_little_mv[] = {
	700, 800, 900, 1000, 1100,
};

/*
 * Idle powers per CPU. RK3399: the core idle-cost-data of Rockchip's
 * rk3399-sched-energy.dtsi (ChromiumOS kernel, chromeos-4.4,
 * arch/arm64/boot/dts/rockchip/; RK3399_CPU_COST_0 <4 4 0 0>,
 * RK3399_CPU_COST_1 <24 24 0 0> for active idle, WFI, cpu-sleep,
 * cluster-sleep). Their units are the model's own, read here as mW: the same
 * file's busy costs at 408 MHz (29 and 165) are close to the device-tree
 * powers above (27.8 mW and 121 mW). The per-cluster costs of that model are
 * not priced (the meter and the Energy Model are per CPU).
 * Hi3660: no public idle cost found for its Cortex-A53 cluster; ASSUMED the
 * RK3399 Cortex-A53 figures (4 mW in WFI, power-gated sleep states at 0).
 */
static const struct emu_idle_power rk3399_little_idle[] = {
	{ "WFI", 4000 }, { "cpu-sleep", 0 }, { "cluster-sleep", 0 },
};
static const struct emu_idle_power rk3399_big_idle[] = {
	{ "WFI", 24000 }, { "cpu-sleep", 0 }, { "cluster-sleep", 0 },
};
static const struct emu_idle_power hi3660_little_idle[] = {
	{ "WFI", 4000 }, { "cpu-sleep-0", 0 }, { "cluster-sleep-0", 0 },
};

/*
 * dynamic-power-coefficient (uW/MHz/V^2): rk3399-base.dtsi cpu_l0-3 <100>,
 * cpu_b0-1 <436>; hi3660.dtsi cpu0-3 <110>.
 */
static_assert(ARRAY_SIZE(rk3399_little_khz) == ARRAY_SIZE(rk3399_little_mv));
static_assert(ARRAY_SIZE(rk3399_big_khz) == ARRAY_SIZE(rk3399_big_mv));
static_assert(ARRAY_SIZE(hi3660_little_khz) == ARRAY_SIZE(hi3660_little_mv));

#define EMU_TABLE(n, k, v, lat, coef, idl) \
	{ n, k, v, ARRAY_SIZE(k), lat, coef, idl, ARRAY_SIZE(idl) }
static const struct emu_opp_table emu_opp_tables[] = {
	EMU_TABLE("rk3399-little", rk3399_little_khz, rk3399_little_mv, 40000, 100, rk3399_little_idle),
	EMU_TABLE("rk3399-big", rk3399_big_khz, rk3399_big_mv, 40000, 436, rk3399_big_idle),
	EMU_TABLE("hi3660-little", hi3660_little_khz, hi3660_little_mv, 300000, 110, hi3660_little_idle),
};

#define EMU_MAX_TABLES 4

#ifdef CONFIG_ARM64
static char *opps = "dt";
#else
static char *opps = "rk3399-little";
#endif
module_param(opps, charp, 0444);
MODULE_PARM_DESC(opps, "comma-separated OPP tables, one per domain, or dt (the device tree's)");

static char *domain = "package";
module_param(domain, charp, 0444);
MODULE_PARM_DESC(domain, "CPUs sharing a policy: package or cpu");

static bool invariance = true;
module_param(invariance, bool, 0444);
MODULE_PARM_DESC(invariance, "feed the scheduler's frequency invariance (needs the board-support patch)");

EMU_TIMING_PARAM("each OPP's speed");

static const struct emu_opp_table *emu_tables[EMU_MAX_TABLES];
static int emu_table_count;
static bool emu_per_cpu;
/* opps=dt: each CPU's table, built from its device-tree node (emu_tables_from_dt()). */
static bool emu_from_dt;
static DEFINE_PER_CPU(struct emu_opp_table *, emu_dt_tables);
#ifdef CONFIG_X86
/*
 * From the board-support patch (kernels/patches/board/0001-x86-aperfmperf-*):
 * weak, so that the module also loads, without invariance, on a kernel
 * without it.
 */
extern bool arch_enable_cpufreq_freq_invariance(void) __weak;
extern void arch_disable_cpufreq_freq_invariance(void) __weak;
#endif

/* This driver owns arch_freq_scale (arch_enable_cpufreq_freq_invariance()). */
static bool emu_owns_freq_scale;

/* The OPP each policy is "running" at; written under the policy's locks. */
struct emu_policy {
	unsigned int cur_khz;
	unsigned int max_khz;
	struct cpufreq_frequency_table table[];
};

static const struct emu_opp_table *emu_find_table(const char *name, size_t len)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(emu_opp_tables); i++)
		if (strlen(emu_opp_tables[i].name) == len &&
		    !strncmp(name, emu_opp_tables[i].name, len))
			return &emu_opp_tables[i];
	return NULL;
}

static int emu_parse_params(void)
{
	const char *p = opps;

	if (!strcmp(domain, "cpu"))
		emu_per_cpu = true;
	else if (strcmp(domain, "package")) {
		pr_err("lisa_emu_cpufreq: domain must be package or cpu, not '%s'\n", domain);
		return -EINVAL;
	}

	if (!strcmp(opps, "dt")) {
		emu_from_dt = true;
		return 0;
	}
	while (*p) {
		size_t len = strcspn(p, ",");
		const struct emu_opp_table *t = emu_find_table(p, len);

		if (!t || emu_table_count == EMU_MAX_TABLES) {
			pr_err("lisa_emu_cpufreq: bad opps '%s'\n", opps);
			return -EINVAL;
		}
		emu_tables[emu_table_count++] = t;
		p += len;
		if (*p == ',')
			p++;
	}
	return emu_table_count ? 0 : -EINVAL;
}

/*
 * The frequency domain a CPU belongs to: a socket of the x86 board, a cluster
 * of the arm64 board's device tree (cpu-map; each cluster has its own OPP table).
 */
static int emu_domain_of(unsigned int cpu)
{
	if (emu_per_cpu)
		return cpu;
#ifdef CONFIG_ARM64
	return topology_cluster_id(cpu);
#else
	return topology_logical_package_id(cpu);
#endif
}

static const struct emu_opp_table *emu_table_for(unsigned int cpu)
{
	if (emu_from_dt)
		return per_cpu(emu_dt_tables, cpu);
	return emu_tables[min(emu_domain_of(cpu), emu_table_count - 1)];
}

/* ---- Tables from the device tree (opps=dt) ---- */

#ifdef CONFIG_OF
static void emu_free_dt_table(struct emu_opp_table *t)
{
	int i;

	if (!t)
		return;
	for (i = 0; i < t->idle_count; i++)
		kfree(t->idle[i].name);
	kfree(t->idle);
	kfree(t->khz);
	kfree(t->mv);
	kfree(t->name);
	kfree(t);
}

/*
 * One CPU's table: the OPPs of its operating-points-v2 node (opp-hz, the first
 * opp-microvolt value, the largest clock-latency-ns), its
 * dynamic-power-coefficient, and idle powers named after the states
 * cpuidle-psci registers: "WFI", then the cpu-idle-states nodes in order.
 */
static struct emu_opp_table *emu_dt_table(struct device_node *cpu_np, struct device_node *opp_np)
{
	struct emu_opp_table *t = kzalloc(sizeof(*t), GFP_KERNEL);
	struct device_node *opp;
	unsigned int *khz, *mv, n = 0, latency = 0;
	struct emu_idle_power *idle;
	u32 coef = 0, uw;
	int i, states;

	if (!t)
		return NULL;
	t->name = kasprintf(GFP_KERNEL, "%pOFn", opp_np);
	n = of_get_available_child_count(opp_np);
	khz = kcalloc(n, sizeof(*khz), GFP_KERNEL);
	mv = kcalloc(n, sizeof(*mv), GFP_KERNEL);
	states = of_count_phandle_with_args(cpu_np, "cpu-idle-states", NULL);
	states = max(states, 0) + 1;
	idle = kcalloc(states, sizeof(*idle), GFP_KERNEL);
	t->khz = khz;
	t->mv = mv;
	t->idle = idle;
	if (!t->name || !khz || !mv || !idle)
		goto fail;
	n = 0;
	for_each_available_child_of_node(opp_np, opp) {
		u64 hz;
		u32 uv, lat;

		if (of_property_read_u64(opp, "opp-hz", &hz) || of_property_read_u32(opp, "opp-microvolt", &uv))
			continue;
		if (!of_property_read_u32(opp, "clock-latency-ns", &lat))
			latency = max(latency, lat);
		/* the core wants ascending frequencies; the device tree lists them so */
		khz[n] = div_u64(hz, 1000);
		mv[n] = uv / 1000;
		n++;
	}
	of_property_read_u32(cpu_np, "dynamic-power-coefficient", &coef);
	if (!n || !coef) {
		pr_err("lisa_emu_cpufreq: %pOF: no OPPs or no dynamic-power-coefficient\n", cpu_np);
		goto fail;
	}
	t->count = n;
	t->transition_latency_ns = latency;
	t->dynamic_power_coefficient = coef;
	for (i = 0; i < states; i++) {
		struct device_node *st;
		char *name;

		/* a state without a power is left out: priced as busy, like any the table does not name */
		if (of_property_read_u32_index(cpu_np, "lisa-ext,idle-power-uw", i, &uw))
			continue;
		st = i ? of_parse_phandle(cpu_np, "cpu-idle-states", i - 1) : NULL;
		if (i && !st)
			break;
		name = i ? kasprintf(GFP_KERNEL, "%pOFn", st) : kstrdup("WFI", GFP_KERNEL);
		of_node_put(st);
		if (!name)
			goto fail;
		idle[t->idle_count].name = name;
		idle[t->idle_count].uw = uw;
		t->idle_count++;
	}
	return t;
fail:
	emu_free_dt_table(t);
	return NULL;
}

static void emu_free_dt_tables(void)
{
	struct emu_opp_table *t;
	int cpu, other;

	for_each_possible_cpu(cpu) {
		t = per_cpu(emu_dt_tables, cpu);
		if (!t)
			continue;
		for_each_possible_cpu(other)
			if (per_cpu(emu_dt_tables, other) == t)
				per_cpu(emu_dt_tables, other) = NULL;
		emu_free_dt_table(t);
	}
}

/* CPUs naming the same OPP table share one emu_opp_table. */
static int emu_tables_from_dt(void)
{
	int cpu, other;

	for_each_possible_cpu(cpu) {
		struct device_node *cpu_np = of_get_cpu_node(cpu, NULL);
		struct device_node *opp_np = cpu_np ? of_parse_phandle(cpu_np, "operating-points-v2", 0) : NULL;
		struct emu_opp_table *t = NULL;

		if (!opp_np) {
			pr_err("lisa_emu_cpufreq: CPU%d: no operating-points-v2 in the device tree\n", cpu);
			of_node_put(cpu_np);
			emu_free_dt_tables();
			return -ENODEV;
		}
		for_each_possible_cpu(other) {
			struct device_node *np = other < cpu ? of_get_cpu_node(other, NULL) : NULL;
			struct device_node *o = np ? of_parse_phandle(np, "operating-points-v2", 0) : NULL;

			if (o == opp_np)
				t = per_cpu(emu_dt_tables, other);
			of_node_put(o);
			of_node_put(np);
			if (t)
				break;
		}
		if (!t)
			t = emu_dt_table(cpu_np, opp_np);
		of_node_put(opp_np);
		of_node_put(cpu_np);
		if (!t) {
			emu_free_dt_tables();
			return -EINVAL;
		}
		per_cpu(emu_dt_tables, cpu) = t;
	}
	return 0;
}
#else
static int emu_tables_from_dt(void)
{
	pr_err("lisa_emu_cpufreq: opps=dt needs a kernel with device-tree support\n");
	return -EINVAL;
}

static void emu_free_dt_tables(void) { }
#endif

/* Busy power of one CPU at OPP @i, as dev_pm_opp_calc_power() computes it. */
static unsigned long emu_opp_uw(const struct emu_opp_table *t, int i)
{
	u64 tmp = (u64)t->dynamic_power_coefficient * t->mv[i] * t->mv[i] * (t->khz[i] / 1000);

	do_div(tmp, 1000000);
	return (unsigned long)tmp;
}

static int emu_opp_index(const struct emu_opp_table *t, unsigned int khz)
{
	int i;

	for (i = 0; i < t->count; i++)
		if (t->khz[i] >= khz)
			return i;
	return t->count - 1;
}

/* ---- Energy Model ---- */

static int emu_em_active_power(struct device *dev, unsigned long *uw, unsigned long *khz)
{
	const struct emu_opp_table *t = emu_table_for(dev->id);
	int i;

	for (i = 0; i < t->count; i++) {
		if (t->khz[i] >= *khz) {
			*khz = t->khz[i];
			*uw = emu_opp_uw(t, i);
			return 0;
		}
	}
	return -EINVAL;
}

static void emu_register_em(struct cpufreq_policy *policy)
{
	static struct em_data_callback cb = EM_DATA_CB(emu_em_active_power);
	const struct emu_opp_table *t = emu_table_for(policy->cpu);
	struct device *dev = get_cpu_device(policy->cpu);
	int ret;

	/*
	 * A CPU's perf domain cannot be unregistered (em_dev_unregister_perf_domain()
	 * ignores CPU devices): after a module reload it is still there, from the
	 * same tables.
	 */
	if (em_pd_get(dev))
		return;
	ret = em_dev_register_perf_domain(dev, t->count, &cb, policy->related_cpus, true);
	if (ret)
		pr_warn("lisa_emu_cpufreq: CPU%u: no Energy Model: %d\n", policy->cpu, ret);
}

/* ---- Speed of an OPP ---- */

/* Wall time of a slice: useful time then stall, at every OPP below f_max. */
#define EMU_SLICE_NS		NSEC_PER_MSEC
/* A residue owed at idle entry is paid this far into the next busy stretch. */
#define EMU_RESIDUE_DELAY_NS	(10 * NSEC_PER_USEC)
/* Stalls shorter than this are not worth a halt; they stay owed. */
#define EMU_MIN_STALL_NS	(5 * NSEC_PER_USEC)
#define EMU_MAX_DEBT_NS		(20 * NSEC_PER_MSEC)

/*
 * One CPU's speed accounting. ->lock orders the CPU itself (idle probe, slice
 * timer) and OPP changes made by other CPUs of its policy.
 */
struct emu_cpu_speed {
	raw_spinlock_t lock;
	unsigned int khz;	/* the OPP the CPU runs at */
	unsigned int max_khz;
	u64 mark_ns;		/* ktime_get_ns() up to which useful time is counted; 0: idle */
	bool stalling;		/* in emu_speed_slice_fn()'s halt: not useful time */
	s64 owed_ns;		/* stall owed; < 0: paid ahead (a late wake-up), credited */
	/* totals, for /sys/kernel/debug/lisa_emu_energy/speed */
	u64 useful_ns;
	u64 stalled_ns;
	u64 dropped_ns;
	u64 stalls;
	u64 preempted;		/* stalls cut short by need_resched() */
	struct hrtimer slice;	/* softirq mode: a slice of useful time has ended */
	struct hrtimer irq;	/* hard mode, same expiry as ->slice: when its interrupt was taken */
	u64 irq_ns;		/* when ->irq last fired */
	struct emu_waker wake;	/* ends a stall */
	call_single_data_t kick;	/* from another CPU: start ->slice */
};

static DEFINE_PER_CPU(struct emu_cpu_speed, emu_speeds);

/* Useful time in a slice at the current OPP. */
static u64 emu_useful_slice_ns(const struct emu_cpu_speed *sp)
{
	return div_u64((u64)EMU_SLICE_NS * sp->khz, sp->max_khz);
}

/* Owe the stall for the useful time since ->mark_ns; caller holds ->lock. */
static void emu_speed_accrue(struct emu_cpu_speed *sp, u64 now)
{
	u64 useful;

	if (!sp->mark_ns || sp->stalling || now <= sp->mark_ns)
		return;
	useful = now - sp->mark_ns;
	sp->mark_ns = now;
	sp->useful_ns += useful;
	if (!READ_ONCE(emu_faithful) || sp->khz >= sp->max_khz)
		return;
	/* useful * (f_max - f) / f: the time the same work takes longer at f */
	sp->owed_ns += (s64)div_u64(useful * (sp->max_khz - sp->khz), sp->khz);
	if (sp->owed_ns > EMU_MAX_DEBT_NS) {
		sp->dropped_ns += sp->owed_ns - EMU_MAX_DEBT_NS;
		sp->owed_ns = EMU_MAX_DEBT_NS;
	}
}

/*
 * ->irq fires in the hard interrupt that expires ->slice; ->slice's handler
 * runs later, in softirq context. Under TCG the guest takes that interrupt
 * late (the vCPU runs the task meanwhile: useful time) and then spends tenths
 * of a millisecond in its entry, the timer code and the softirq (not useful).
 * Measured at 408 MHz on RK3399's tables, 1 ms slices: counting the whole delay
 * from the expiry to the handler as useful made the CPU do 35 % less work than
 * f/f_max; counting none of it, 83 % more. So useful time ends when the
 * interrupt was taken, and what follows up to the handler is stall paid.
 */
static enum hrtimer_restart emu_speed_irq_fn(struct hrtimer *timer)
{
	struct emu_cpu_speed *sp = container_of(timer, struct emu_cpu_speed, irq);

	WRITE_ONCE(sp->irq_ns, ktime_get_ns());
	return HRTIMER_NORESTART;
}

/* On the CPU itself: ->slice and ->irq, both at @at. */
static void emu_speed_arm_at(struct emu_cpu_speed *sp, ktime_t at)
{
	hrtimer_start(&sp->irq, at, HRTIMER_MODE_ABS_PINNED_HARD);
	hrtimer_start(&sp->slice, at, HRTIMER_MODE_ABS_PINNED_SOFT);
}

/* On the CPU itself: the next slice timer, if the CPU owes or will owe. */
static void emu_speed_arm(struct emu_cpu_speed *sp, u64 delay_ns)
{
	emu_speed_arm_at(sp, ktime_add_ns(ktime_get(), delay_ns));
}

static void emu_speed_cancel(struct emu_cpu_speed *sp)
{
	hrtimer_try_to_cancel(&sp->slice);
	hrtimer_try_to_cancel(&sp->irq);
}

static enum hrtimer_restart emu_speed_slice_fn(struct hrtimer *timer)
{
	struct emu_cpu_speed *sp = container_of(timer, struct emu_cpu_speed, slice);
	unsigned long flags;
	u64 now = ktime_get_ns(), irq = READ_ONCE(sp->irq_ns), pay = 0, paid, next;
	ktime_t at;
	bool preempted;

	raw_spin_lock_irqsave(&sp->lock, flags);
	if (!sp->mark_ns || !READ_ONCE(emu_faithful)) {
		if (!READ_ONCE(emu_faithful))
			sp->owed_ns = 0;
		raw_spin_unlock_irqrestore(&sp->lock, flags);
		return HRTIMER_NORESTART;	/* idle: the switch to a task re-arms */
	}
	if (irq > sp->mark_ns && irq < now) {
		/* useful time ended at the interrupt; its handling so far is a stall paid */
		emu_speed_accrue(sp, irq);
		sp->mark_ns = now;
		sp->stalled_ns += now - irq;
		sp->owed_ns = max_t(s64, sp->owed_ns - (s64)(now - irq), -(s64)EMU_MAX_DEBT_NS);
	} else {
		emu_speed_accrue(sp, now);
	}
	/* The idle task is not slowed down: what it owes is paid by the next task. */
	if (!is_idle_task(current) && sp->owed_ns >= EMU_MIN_STALL_NS) {
		pay = sp->owed_ns;
		sp->stalling = true;
	}
	raw_spin_unlock_irqrestore(&sp->lock, flags);

	if (pay) {
		paid = emu_halt_until(&sp->wake, now + pay, &preempted);
		raw_spin_lock_irqsave(&sp->lock, flags);
		sp->stalling = false;
		sp->stalled_ns += paid;
		sp->stalls++;
		sp->preempted += preempted;
		/* a stall longer than owed (its wake-up came late) is credited to the next ones */
		sp->owed_ns = max_t(s64, sp->owed_ns - (s64)paid, -(s64)EMU_MAX_DEBT_NS);
		now = ktime_get_ns();
		if (sp->mark_ns)
			sp->mark_ns = now;
		raw_spin_unlock_irqrestore(&sp->lock, flags);
	}

	raw_spin_lock_irqsave(&sp->lock, flags);
	if (is_idle_task(current))
		next = 0;	/* the switch to a task re-arms: see emu_speed_resume() */
	else if (sp->khz < sp->max_khz)
		next = emu_useful_slice_ns(sp);
	else if (sp->owed_ns >= EMU_MIN_STALL_NS)
		next = EMU_SLICE_NS;	/* preempted mid-stall at f_max: pay the rest later */
	else
		next = 0;
	raw_spin_unlock_irqrestore(&sp->lock, flags);
	if (!next)
		return HRTIMER_NORESTART;
	/* from now, not from the last expiry: the stall is not useful time */
	at = ktime_add_ns(ktime_get(), next);
	hrtimer_start(&sp->irq, at, HRTIMER_MODE_ABS_PINNED_HARD);
	hrtimer_set_expires(timer, at);
	return HRTIMER_RESTART;
}

/*
 * From the cpu_idle probe, on the CPU itself, interrupts disabled: useful time
 * stops at idle entry and starts again at idle exit. An interrupt handled out
 * of idle owes its stall too; the next task pays it (emu_speed_resume()).
 */
static void emu_speed_idle(unsigned int cpu, bool idle)
{
	struct emu_cpu_speed *sp = per_cpu_ptr(&emu_speeds, cpu);
	u64 now = ktime_get_ns();
	unsigned long flags;

	raw_spin_lock_irqsave(&sp->lock, flags);
	if (idle) {
		emu_speed_accrue(sp, now);
		sp->mark_ns = 0;
	} else if (!sp->mark_ns) {
		sp->mark_ns = now;
	}
	raw_spin_unlock_irqrestore(&sp->lock, flags);
	if (idle)
		emu_speed_cancel(sp);
}

/*
 * From the sched_switch probe, on the CPU itself, interrupts disabled: a task
 * runs after the idle task. Arm the slice timer, or an early one for what the
 * CPU owes (a residue, an interrupt's stall). Never queued or running here: the
 * switch to the idle task cancelled it, and its callback does not schedule.
 */
static void emu_speed_resume(struct emu_cpu_speed *sp)
{
	u64 delay = 0;

	raw_spin_lock(&sp->lock);
	if (!sp->mark_ns)	/* the idle task ran without entering idle */
		sp->mark_ns = ktime_get_ns();
	if (READ_ONCE(emu_faithful)) {
		if (sp->owed_ns >= EMU_MIN_STALL_NS)
			delay = EMU_RESIDUE_DELAY_NS;
		else if (sp->khz < sp->max_khz)
			delay = emu_useful_slice_ns(sp);
	}
	raw_spin_unlock(&sp->lock);
	if (delay && !hrtimer_active(&sp->slice))
		emu_speed_arm(sp, delay);
}

/* Under the runqueue lock, on the CPU that switches, interrupts disabled. */
static void emu_probe_sched_switch(void *data, bool preempt, struct task_struct *prev,
				   struct task_struct *next, unsigned int prev_state)
{
	struct emu_cpu_speed *sp = this_cpu_ptr(&emu_speeds);

	if (is_idle_task(next) && !is_idle_task(prev))
		emu_speed_cancel(sp);
	else if (is_idle_task(prev) && !is_idle_task(next))
		emu_speed_resume(sp);
}

static struct tracepoint *emu_sched_switch_tp;

static void emu_find_sched_switch(struct tracepoint *tp, void *priv)
{
	if (!strcmp(tp->name, "sched_switch"))
		*(struct tracepoint **)priv = tp;
}

/*
 * On the CPU itself: start ->slice unless it is queued or running, or the idle
 * task runs (the switch to a task starts it). Its callback may be running below
 * us (an OPP change from the tick that interrupted its stall): it restarts the
 * timer itself, and starting it here would queue it under the callback's feet.
 */
static void emu_speed_kick(void *info)
{
	struct emu_cpu_speed *sp = info;

	if (READ_ONCE(sp->mark_ns) && !is_idle_task(current) && !hrtimer_active(&sp->slice))
		emu_speed_arm(sp, emu_useful_slice_ns(sp));
}

/* An OPP change of @cpu, from any CPU of its policy, in any context. */
static void emu_speed_set(unsigned int cpu, unsigned int khz, unsigned int max_khz)
{
	struct emu_cpu_speed *sp = per_cpu_ptr(&emu_speeds, cpu);
	unsigned long flags;
	bool kick;

	raw_spin_lock_irqsave(&sp->lock, flags);
	emu_speed_accrue(sp, ktime_get_ns());	/* at the old speed */
	kick = khz < max_khz && sp->khz >= sp->max_khz && sp->mark_ns && READ_ONCE(emu_faithful);
	sp->khz = khz;
	sp->max_khz = max_khz;
	raw_spin_unlock_irqrestore(&sp->lock, flags);
	if (!kick)
		return;
	/* the slice timer is pinned: arm it from its own CPU */
	if (cpu == get_cpu())
		emu_speed_kick(sp);
	else
		smp_call_function_single_async(cpu, &sp->kick);	/* -EBUSY: one is on its way */
	put_cpu();
}

/* The timing switched (to faithful): CPUs busy below f_max start their slices now. */
static void emu_speed_kick_this_cpu(void *unused)
{
	struct emu_cpu_speed *sp = this_cpu_ptr(&emu_speeds);

	if (sp->khz < sp->max_khz)
		emu_speed_kick(sp);
}

static void emu_speed_timing_changed(void)
{
	if (READ_ONCE(emu_faithful))
		on_each_cpu(emu_speed_kick_this_cpu, NULL, 0);
}

static void emu_speed_init(void)
{
	u64 now = ktime_get_ns();
	int cpu;

	for_each_possible_cpu(cpu) {
		struct emu_cpu_speed *sp = per_cpu_ptr(&emu_speeds, cpu);
		const struct emu_opp_table *t = emu_table_for(cpu);

		raw_spin_lock_init(&sp->lock);
		sp->max_khz = sp->khz = t->khz[t->count - 1];
		/* A CPU running this now is busy; the others are idle or will say so. */
		sp->mark_ns = cpu == raw_smp_processor_id() ? now : 0;
		hrtimer_init(&sp->slice, CLOCK_MONOTONIC, HRTIMER_MODE_ABS_PINNED_SOFT);
		sp->slice.function = emu_speed_slice_fn;
		hrtimer_init(&sp->irq, CLOCK_MONOTONIC, HRTIMER_MODE_ABS_PINNED_HARD);
		sp->irq.function = emu_speed_irq_fn;
		emu_waker_init(&sp->wake);
		INIT_CSD(&sp->kick, emu_speed_kick, sp);
	}
	WRITE_ONCE(emu_timing_changed, emu_speed_timing_changed);
}

/* After the driver and the idle probe are gone: nothing arms the timers any more. */
static void emu_speed_stop(void)
{
	int cpu;

	WRITE_ONCE(emu_timing_changed, NULL);
	kick_all_cpus_sync();	/* runs every IPI still queued, emu_speed_kick() included */
	for_each_possible_cpu(cpu) {
		struct emu_cpu_speed *sp = per_cpu_ptr(&emu_speeds, cpu);

		hrtimer_cancel(&sp->slice);
		hrtimer_cancel(&sp->irq);
		hrtimer_cancel(&sp->wake.timer);
	}
}

/*
 * /sys/kernel/debug/lisa_emu_energy/speed, per CPU:
 * "cpuN <useful_ns> <stalled_ns> <owed_ns> <dropped_ns> <stalls> <preempted stalls>".
 */
static int emu_speed_show(struct seq_file *s, void *unused)
{
	unsigned long flags;
	int cpu;

	for_each_online_cpu(cpu) {
		struct emu_cpu_speed *sp = per_cpu_ptr(&emu_speeds, cpu);
		u64 useful, stalled, dropped, stalls, preempted;
		s64 owed;

		raw_spin_lock_irqsave(&sp->lock, flags);
		useful = sp->useful_ns;
		stalled = sp->stalled_ns;
		owed = sp->owed_ns;
		dropped = sp->dropped_ns;
		stalls = sp->stalls;
		preempted = sp->preempted;
		raw_spin_unlock_irqrestore(&sp->lock, flags);
		seq_printf(s, "cpu%d %llu %llu %lld %llu %llu %llu\n", cpu, useful, stalled, owed, dropped,
			   stalls, preempted);
	}
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(emu_speed);

/* ---- Energy meter ---- */

#define EMU_MAX_CHANNELS 8

/* One CPU's integrated energy; the lock orders the idle probe, OPP changes and readers. */
struct emu_cpu_meter {
	raw_spinlock_t lock;
	u64 last_ns;		/* local_clock() of the last integration */
	u64 energy_uj;
	u64 rem_fj;		/* < 10^9 fJ not yet in energy_uj */
	unsigned int busy_uw;	/* power at the current OPP */
	unsigned int idle_uw;	/* power in the current idle state */
	bool idle;
	int channel;		/* hwmon channel (policy), -1 if none */
};

static DEFINE_PER_CPU(struct emu_cpu_meter, emu_meters);
static int emu_channel_count;
static int emu_channel_first_cpu[EMU_MAX_CHANNELS];
static bool emu_probe_registered;

/* Add the energy since ->last_ns at the current power; caller holds ->lock. */
static void emu_meter_advance(struct emu_cpu_meter *m, u64 now)
{
	u64 uw = m->idle ? m->idle_uw : m->busy_uw;
	u32 ns;
	u64 s, fj;

	if (now <= m->last_ns)
		return;
	s = div_u64_rem(now - m->last_ns, NSEC_PER_SEC, &ns);
	/* 1 s at P uW is P uJ; the sub-second part in fJ (uW * ns) fits easily. */
	fj = m->rem_fj + (u64)ns * uw;
	m->energy_uj += s * uw + div_u64_rem(fj, NSEC_PER_SEC, &ns);
	m->rem_fj = ns;
	m->last_ns = now;
}

static void emu_meter_set_busy_power(unsigned int cpu, unsigned int uw)
{
	struct emu_cpu_meter *m = per_cpu_ptr(&emu_meters, cpu);
	unsigned long flags;

	raw_spin_lock_irqsave(&m->lock, flags);
	emu_meter_advance(m, local_clock());
	m->busy_uw = uw;
	raw_spin_unlock_irqrestore(&m->lock, flags);
}

/* Power of the idle state @index of the running cpuidle driver; false: not priced (busy). */
static bool emu_idle_state_uw(unsigned int cpu, unsigned int index, unsigned int *uw)
{
	const struct emu_opp_table *t = emu_table_for(cpu);
	struct cpuidle_driver *drv = cpuidle_get_driver();
	int i;

	if (!drv || index >= drv->state_count)
		return false;
	for (i = 0; i < t->idle_count; i++) {
		if (!strcmp(drv->states[index].name, t->idle[i].name)) {
			*uw = t->idle[i].uw;
			return true;
		}
	}
	return false;
}

/* Runs on @cpu_id itself, in the idle path, interrupts off (cpuidle_enter_state(), default_idle_call()). */
static void emu_probe_cpu_idle(void *data, unsigned int state, unsigned int cpu_id)
{
	struct emu_cpu_meter *m;
	unsigned long flags;
	unsigned int uw = 0;
	bool idle;

	if (cpu_id >= nr_cpu_ids)
		return;
	m = per_cpu_ptr(&emu_meters, cpu_id);
	idle = state != PWR_EVENT_EXIT && emu_idle_state_uw(cpu_id, state, &uw);
	raw_spin_lock_irqsave(&m->lock, flags);
	emu_meter_advance(m, local_clock());
	m->idle = idle;
	m->idle_uw = uw;
	raw_spin_unlock_irqrestore(&m->lock, flags);
	/* Idle is any state, priced or not (POLL, another table's): no work is done. */
	if (cpu_id == raw_smp_processor_id())
		emu_speed_idle(cpu_id, state != PWR_EVENT_EXIT);
}

static u64 emu_channel_uj(int channel)
{
	u64 now = local_clock(), total = 0;
	unsigned long flags;
	int cpu;

	for_each_possible_cpu(cpu) {
		struct emu_cpu_meter *m = per_cpu_ptr(&emu_meters, cpu);

		if (m->channel != channel)
			continue;
		raw_spin_lock_irqsave(&m->lock, flags);
		emu_meter_advance(m, now);
		total += m->energy_uj;
		raw_spin_unlock_irqrestore(&m->lock, flags);
	}
	return total;
}

static umode_t emu_hwmon_is_visible(const void *data, enum hwmon_sensor_types type, u32 attr, int channel)
{
	return 0444;
}

static int emu_hwmon_read(struct device *dev, enum hwmon_sensor_types type, u32 attr, int channel, long *val)
{
	if (type != hwmon_energy || attr != hwmon_energy_input)
		return -EOPNOTSUPP;
	/*
	 * hwmon_energy, not hwmon_energy64: the core gives energy64 channels no
	 * string labels (is_string_attr(), drivers/hwmon/hwmon.c), and long is
	 * 64-bit on the x86_64 guest.
	 */
	*val = emu_channel_uj(channel);
	return 0;
}

static_assert(sizeof(long) == sizeof(u64), "energyN_input is a long");

static char emu_channel_labels[EMU_MAX_CHANNELS][12];

static int emu_hwmon_read_string(struct device *dev, enum hwmon_sensor_types type, u32 attr,
				 int channel, const char **str)
{
	if (type != hwmon_energy || attr != hwmon_energy_label)
		return -EOPNOTSUPP;
	*str = emu_channel_labels[channel];
	return 0;
}

static const struct hwmon_ops emu_hwmon_ops = {
	.is_visible = emu_hwmon_is_visible,
	.read = emu_hwmon_read,
	.read_string = emu_hwmon_read_string,
};

static u32 emu_energy_config[EMU_MAX_CHANNELS + 1];
static const struct hwmon_channel_info emu_energy_info = {
	.type = hwmon_energy,
	.config = emu_energy_config,
};
static const struct hwmon_channel_info * const emu_hwmon_info[] = { &emu_energy_info, NULL };
static const struct hwmon_chip_info emu_hwmon_chip = { .ops = &emu_hwmon_ops, .info = emu_hwmon_info };

static struct platform_device *emu_meter_pdev;
static struct device *emu_hwmon_dev;
static struct dentry *emu_debugfs_dir;

/* /sys/kernel/debug/lisa_emu_energy/idle_mw: "cpuN <state> <mW>" per CPU and priced state. */
static int emu_idle_mw_show(struct seq_file *s, void *unused)
{
	int cpu, i;

	for_each_online_cpu(cpu) {
		const struct emu_opp_table *t = emu_table_for(cpu);

		for (i = 0; i < t->idle_count; i++)
			seq_printf(s, "cpu%d %s %u.%03u\n", cpu, t->idle[i].name,
				   t->idle[i].uw / 1000, t->idle[i].uw % 1000);
	}
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(emu_idle_mw);

/* Channels: one per future policy (package, or CPU with domain=cpu), in CPU order. */
static void emu_meter_init_cpus(void)
{
	u64 now = local_clock();
	int cpu, c;

	for_each_possible_cpu(cpu) {
		struct emu_cpu_meter *m = per_cpu_ptr(&emu_meters, cpu);
		const struct emu_opp_table *t = emu_table_for(cpu);

		raw_spin_lock_init(&m->lock);
		m->last_ns = now;
		m->busy_uw = emu_opp_uw(t, t->count - 1);
		m->channel = -1;
		if (!cpu_online(cpu))
			continue;
		for (c = 0; c < emu_channel_count; c++) {
			int first = emu_channel_first_cpu[c];

			if (emu_domain_of(first) == emu_domain_of(cpu))
				break;
		}
		if (c == emu_channel_count) {
			if (c == EMU_MAX_CHANNELS)
				continue;
			emu_channel_first_cpu[c] = cpu;
			snprintf(emu_channel_labels[c], sizeof(emu_channel_labels[c]), "pd%d", cpu);
			emu_energy_config[c] = HWMON_E_INPUT | HWMON_E_LABEL;
			emu_channel_count++;
		}
		m->channel = c;
	}
}

static int emu_meter_start(void)
{
	int ret;

	emu_meter_init_cpus();
	emu_speed_init();
	ret = register_trace_cpu_idle(emu_probe_cpu_idle, NULL);
	if (ret) {
		pr_warn("lisa_emu_cpufreq: no cpu_idle probe (%d): idle counted as busy\n", ret);
	} else {
		emu_probe_registered = true;
	}
	for_each_kernel_tracepoint(emu_find_sched_switch, &emu_sched_switch_tp);
	ret = emu_sched_switch_tp ? tracepoint_probe_register(emu_sched_switch_tp,
							     (void *)emu_probe_sched_switch, NULL) : -ENOENT;
	if (ret) {
		/* the slice timer would never start: faithful timing could not pay any OPP's speed */
		pr_err("lisa_emu_cpufreq: no sched_switch probe: %d\n", ret);
		emu_sched_switch_tp = NULL;
		return ret;
	}
	emu_meter_pdev = platform_device_register_simple("lisa_emu_energy", PLATFORM_DEVID_NONE, NULL, 0);
	if (IS_ERR(emu_meter_pdev)) {
		ret = PTR_ERR(emu_meter_pdev);
		emu_meter_pdev = NULL;
		return ret;
	}
	emu_hwmon_dev = hwmon_device_register_with_info(&emu_meter_pdev->dev, "lisa_emu_energy", NULL,
							&emu_hwmon_chip, NULL);
	if (IS_ERR(emu_hwmon_dev)) {
		ret = PTR_ERR(emu_hwmon_dev);
		emu_hwmon_dev = NULL;
		return ret;
	}
	emu_debugfs_dir = debugfs_create_dir("lisa_emu_energy", NULL);
	debugfs_create_file("idle_mw", 0444, emu_debugfs_dir, NULL, &emu_idle_mw_fops);
	debugfs_create_file("speed", 0444, emu_debugfs_dir, NULL, &emu_speed_fops);
	return 0;
}

static void emu_meter_stop(void)
{
	debugfs_remove_recursive(emu_debugfs_dir);
	if (emu_hwmon_dev)
		hwmon_device_unregister(emu_hwmon_dev);
	if (emu_meter_pdev)
		platform_device_unregister(emu_meter_pdev);
	if (emu_probe_registered)
		unregister_trace_cpu_idle(emu_probe_cpu_idle, NULL);
	if (emu_sched_switch_tp)
		tracepoint_probe_unregister(emu_sched_switch_tp, (void *)emu_probe_sched_switch, NULL);
	if (emu_probe_registered || emu_sched_switch_tp)
		tracepoint_synchronize_unregister();
	emu_probe_registered = false;
	emu_sched_switch_tp = NULL;
	emu_speed_stop();
}

/* "Run" the policy's CPUs at @khz; called under the policy's locks. */
static void emu_set_opp(struct cpufreq_policy *policy, unsigned int khz)
{
	struct emu_policy *ep = policy->driver_data;
	const struct emu_opp_table *t = emu_table_for(policy->cpu);
	unsigned int uw = emu_opp_uw(t, emu_opp_index(t, khz));
	int cpu;

	WRITE_ONCE(ep->cur_khz, khz);
	/* ->cpus, not ->related_cpus: ->init() runs before the core sets the latter */
	for_each_cpu(cpu, policy->cpus) {
		emu_meter_set_busy_power(cpu, uw);
		emu_speed_set(cpu, khz, ep->max_khz);
	}
#if defined(CONFIG_X86_64) && defined(CONFIG_SMP)
	/* arm64: the cpufreq core sets arch_freq_scale after ->fast_switch / ->target_index */
	if (emu_owns_freq_scale) {
		unsigned long scale = div_u64((u64)khz << SCHED_CAPACITY_SHIFT, ep->max_khz);

		for_each_cpu(cpu, policy->cpus)
			WRITE_ONCE(per_cpu(arch_freq_scale, cpu), scale);
	}
#endif
}

static int emu_cpufreq_init(struct cpufreq_policy *policy)
{
	const struct emu_opp_table *t = emu_table_for(policy->cpu);
	struct emu_policy *ep;
	int i;

	ep = kzalloc(struct_size(ep, table, t->count + 1), GFP_KERNEL);
	if (!ep)
		return -ENOMEM;
	for (i = 0; i < t->count; i++) {
		ep->table[i].driver_data = i;
		ep->table[i].frequency = t->khz[i];
	}
	ep->table[t->count].frequency = CPUFREQ_TABLE_END;
	/* Boot firmware usually leaves the CPUs at the top OPP. */
	ep->max_khz = t->khz[t->count - 1];
	ep->cur_khz = ep->max_khz;

	cpumask_clear(policy->cpus);
	for_each_possible_cpu(i)
		if (emu_domain_of(i) == emu_domain_of(policy->cpu))
			cpumask_set_cpu(i, policy->cpus);

	policy->driver_data = ep;
	policy->freq_table = ep->table;
	policy->cpuinfo.transition_latency = t->transition_latency_ns;
	policy->cur = ep->cur_khz;
	policy->fast_switch_possible = true;
	emu_set_opp(policy, ep->cur_khz);
	return 0;
}

static void emu_cpufreq_exit(struct cpufreq_policy *policy)
{
	kfree(policy->driver_data);
	policy->driver_data = NULL;
}

static int emu_cpufreq_target_index(struct cpufreq_policy *policy, unsigned int index)
{
	emu_set_opp(policy, policy->freq_table[index].frequency);
	return 0;
}

static unsigned int emu_cpufreq_fast_switch(struct cpufreq_policy *policy,
					    unsigned int target_freq)
{
	/* Lowest OPP at or above the target, within the policy's limits. */
	int index = cpufreq_table_find_index_l(policy, target_freq, false);
	unsigned int khz = policy->freq_table[index].frequency;

	emu_set_opp(policy, khz);
	return khz;
}

static unsigned int emu_cpufreq_get(unsigned int cpu)
{
	struct cpufreq_policy *policy = cpufreq_cpu_get_raw(cpu);
	struct emu_policy *ep = policy ? policy->driver_data : NULL;

	return ep ? READ_ONCE(ep->cur_khz) : 0;
}

static struct cpufreq_driver emu_cpufreq_driver = {
	.name = "lisa-emu",
	.flags = CPUFREQ_HAVE_GOVERNOR_PER_POLICY | CPUFREQ_NEED_INITIAL_FREQ_CHECK,
	.init = emu_cpufreq_init,
	.exit = emu_cpufreq_exit,
	.verify = cpufreq_generic_frequency_table_verify,
	.target_index = emu_cpufreq_target_index,
	.fast_switch = emu_cpufreq_fast_switch,
	.get = emu_cpufreq_get,
	.register_em = emu_register_em,
	.attr = cpufreq_generic_attr,
};

/*
 * Take arch_freq_scale over before the policies exist: each policy's first
 * OPP then sets its CPUs' scale (emu_cpufreq_init()), so none is left stale.
 */
static void emu_take_freq_scale(void)
{
#ifdef CONFIG_X86
	if (!invariance)
		return;
	if (arch_enable_cpufreq_freq_invariance)
		emu_owns_freq_scale = arch_enable_cpufreq_freq_invariance();
	else
		pr_warn("lisa_emu_cpufreq: kernel lacks the board-support patch: no frequency invariance\n");
#endif
}

static void emu_release_freq_scale(void)
{
#ifdef CONFIG_X86
	if (emu_owns_freq_scale)
		arch_disable_cpufreq_freq_invariance();
#endif
	emu_owns_freq_scale = false;
}

static int __init emu_cpufreq_module_init(void)
{
	int ret = emu_parse_params();

	if (!ret && emu_from_dt)
		ret = emu_tables_from_dt();
	if (ret)
		return ret;
	ret = emu_meter_start();
	if (ret) {
		pr_err("lisa_emu_cpufreq: energy meter: %d\n", ret);
		emu_meter_stop();
		emu_free_dt_tables();
		return ret;
	}
	emu_take_freq_scale();
	ret = cpufreq_register_driver(&emu_cpufreq_driver);
	if (ret) {
		pr_err("lisa_emu_cpufreq: cpufreq_register_driver failed: %d\n", ret);
		emu_release_freq_scale();
		emu_meter_stop();
		emu_free_dt_tables();
		return ret;
	}
	pr_info("lisa_emu_cpufreq: opps=%s domain=%s invariance=%s timing=%s energy meter: %d channels\n",
		opps, domain, IS_ENABLED(CONFIG_ARM64) ? "cpufreq core" : emu_owns_freq_scale ? "driver" : "none",
		emu_faithful ? "faithful" : "decisions", emu_channel_count);
	return 0;
}

static void __exit emu_cpufreq_module_exit(void)
{
	cpufreq_unregister_driver(&emu_cpufreq_driver);
	emu_release_freq_scale();
	emu_meter_stop();
	emu_free_dt_tables();
}

module_init(emu_cpufreq_module_init);
module_exit(emu_cpufreq_module_exit);
MODULE_DESCRIPTION("lisa-ext: real SoC OPP tables for a guest without cpufreq");
MODULE_LICENSE("GPL");
