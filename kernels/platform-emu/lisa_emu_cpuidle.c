// SPDX-License-Identifier: GPL-2.0
/*
 * lisa-ext platform emulation: a cpuidle driver exposing a real SoC's
 * idle-state table on a guest (QEMU TCG) that has no idle states.
 *
 * x86: the tables below. arm64 (table=dt, the default there): each CPU's idle
 * states from the guest's device tree (the SoC's arm,idle-state nodes that
 * lisa_ext.vboard.devicetree put there), turned into cpuidle states by the
 * kernel's own dt_init_idle_driver() as cpuidle-psci does, one driver per
 * CPU, every state entered with WFI (as cpu_do_idle() does, without the
 * pseudo-NMI priority masking the board's kernel lacks). Not through PSCI CPU_SUSPEND: under QEMU
 * 7.2's TCG a guest whose CPUs idle there stops taking timer interrupts
 * (every CPU halted in the HVC, jiffies frozen), so the board keeps
 * cpuidle-psci from initialising (initcall_blacklist) and loads this driver
 * instead; the sysfs states, names, latencies and residencies are the same.
 *
 * On x86 every state is entered with HLT. The table tells the cpuidle core and
 * its governors (menu, teo) what each state costs on the SoC: its name, exit
 * latency and target residency, copied from the SoC's device tree (exit
 * latency = entry-latency-us + exit-latency-us, target residency =
 * min-residency-us, as drivers/cpuidle/dt_idle_states.c computes them).
 *
 * Exit latency, paid (timing=faithful; the modules load with decisions): after the
 * interrupt that ends the halt, the CPU stays halted until a per-CPU hrtimer
 * at wake-up + the state's exit latency has fired, before ->enter() returns.
 * The woken task is held back meanwhile, as on the SoC, where the CPU is still
 * powering up when the interrupt arrives. The interrupt's wake-up, though, ran
 * before the hold (on the SoC it runs after the exit) and left the next
 * schedule() its rq clock from before it: the hold ends with
 * sched_idle_exit_latency_paid() (board-support patch
 * kernels/patches/board/0002-*), which refreshes that clock and ages the tasks
 * queued during the hold as asleep, so that the woken task's runtime and PELT
 * signals start after the exit, not at the interrupt (without it, a task woken
 * from RK3399's cluster-sleep is charged the 900 us hold as running time, and
 * as runnable time, which keeps its util_est from falling). The residency
 * the cpuidle core measures includes the hold, as it includes the exit on the
 * SoC (menu and teo subtract the exit latency from it themselves). How
 * (lisa_emu_cost.h for the halt): every state has CPUIDLE_FLAG_RCU_IDLE, so
 * ->enter() tells RCU itself: each halt runs between ct_cpuidle_enter() and
 * ct_cpuidle_exit() (RCU not watching, as the core would do it), and arming
 * the hrtimer runs between the halts with RCU watching, as timer code needs.
 * Interrupts arriving during the hold are handled at once (on the SoC they
 * would wait for the exit to finish); the hold is not cut short by them. Latencies under
 * EMU_MIN_HOLD_NS (WFI's 1 us) are not paid: a TCG halt and wake-up costs the
 * guest more than that already. timing=decisions pays nothing: every state
 * is a plain halt (HLT, WFI), as before this mechanism existed.
 *
 * What is real: the governors' state selection, the residency bookkeeping,
 * the cpu_idle / cpu_idle_miss trace events, the usage/time/above/below
 * counters in sysfs, and (faithful) the exit latency's delay. What is not:
 * entering a "deep" state saves no power of the host, the wake-up latency
 * under the exit latency is QEMU's, and no local timer stops
 * (CPUIDLE_FLAG_TIMER_STOP is not set, no broadcast timer is involved).
 *
 * The holds are counted per state in
 * /sys/kernel/debug/lisa_emu_cpuidle/holds: "<state> <holds> <held_ns>
 * <late_ns>", late_ns being the time held beyond the exit latencies, summed
 * (negative: short of them). Under TCG a timer interrupt comes late, by
 * tens of microseconds on a quiet host and milliseconds on a loaded one: the
 * hold's timer is programmed early by the lateness its CPU's timers have had
 * (lisa_emu_cost.h), and what a hold overpays anyway is taken off the CPU's
 * next ones (a hold owing less than EMU_MIN_HOLD_NS is skipped), so that the
 * mean hold is the exit latency and late_ns stays near 0. On a loaded host
 * single holds still vary by the timer's lateness.
 *
 * Parameters:
 *   table=rk3399          Rockchip RK3399 (rk3399-base.dtsi, both clusters)
 *   table=hi3660-little   HiSilicon Kirin 960 Cortex-A53 cluster (hi3660.dtsi)
 *   table=dt              arm64: each CPU's cpu-idle-states from the device tree
 *   poll_state=1          make state 0 the kernel's polling state instead of
 *                         a HLT-based "WFI" (x86 drivers do that; Arm does not)
 *   timing=faithful|decisions  pay the exit latency or not (writable at run
 *                         time in /sys/module/lisa_emu_cpuidle/parameters/)
 */

#include <linux/atomic.h>
#include <linux/cpuidle.h>
#include <linux/debugfs.h>
#include <linux/hrtimer.h>
#include <linux/init.h>
#include <linux/instrumentation.h>
#include <linux/irqflags.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/percpu.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/string.h>
#include <linux/of.h>
#include <linux/slab.h>

#include "lisa_emu_cost.h"

struct emu_idle_state {
	const char *name;
	const char *desc;
	unsigned int exit_latency_us;
	unsigned int target_residency_us;
};

struct emu_idle_table {
	const char *name;
	const struct emu_idle_state *states;
	int count;
};

/* rk3399-base.dtsi: cpu-sleep 120+250 us / 900 us, cluster-sleep 400+500 us / 2000 us */
static const struct emu_idle_state rk3399_states[] = {
	{ "WFI", "ARM WFI (HLT)", 1, 1 },
	{ "cpu-sleep", "RK3399 CPU_SLEEP (HLT)", 370, 900 },
	{ "cluster-sleep", "RK3399 CLUSTER_SLEEP (HLT)", 900, 2000 },
};

/* hi3660.dtsi, Cortex-A53 cluster: cpu-sleep-0 400+650 us / 1500 us, cluster-sleep-0 500+1600 us / 3500 us */
static const struct emu_idle_state hi3660_little_states[] = {
	{ "WFI", "ARM WFI (HLT)", 1, 1 },
	{ "cpu-sleep-0", "Hi3660 A53 CPU_SLEEP_0 (HLT)", 1050, 1500 },
	{ "cluster-sleep-0", "Hi3660 A53 CLUSTER_SLEEP_0 (HLT)", 2100, 3500 },
};

static const struct emu_idle_table emu_idle_tables[] = {
	{ "rk3399", rk3399_states, ARRAY_SIZE(rk3399_states) },
	{ "hi3660-little", hi3660_little_states, ARRAY_SIZE(hi3660_little_states) },
};

#ifdef CONFIG_ARM64
static char *table = "dt";
#else
static char *table = "rk3399";
#endif
module_param(table, charp, 0444);
MODULE_PARM_DESC(table, "idle-state table: rk3399, hi3660-little or dt (arm64: the device tree's)");

static bool poll_state;
module_param(poll_state, bool, 0444);
MODULE_PARM_DESC(poll_state, "state 0 is the polling state instead of HLT-based WFI");

EMU_TIMING_PARAM("each idle state's exit latency");

/* Shorter exit latencies are not paid: one TCG halt and wake-up costs more. */
#define EMU_MIN_HOLD_NS (10 * NSEC_PER_USEC)

/*
 * sched_idle_exit_latency_paid() of the board-support patch
 * (kernels/patches/board/0002-sched-idle-*), looked up at load rather than
 * linked: a weak reference needs a GOT relocation that arm64's module loader
 * refuses. NULL on a kernel without the patch, where the woken task's runtime
 * then includes the hold.
 */
#define EMU_EXIT_LATENCY_PAID "sched_idle_exit_latency_paid"
static void (*emu_exit_latency_paid)(void);

static DEFINE_PER_CPU(struct emu_waker, emu_wakers);
/*
 * Per CPU, what its holds paid beyond their exit latencies (< 0: short of
 * them), taken off the next hold: the mean hold is the exit latency even when
 * TCG delivers the hold's timer later than that latency is long.
 */
static DEFINE_PER_CPU(s64, emu_hold_credit_ns);
#define EMU_MAX_HOLD_CREDIT_NS (10 * NSEC_PER_MSEC)

struct emu_hold_stats {
	atomic64_t holds;
	atomic64_t held_ns;
	atomic64_t late_ns;
};
static struct emu_hold_stats emu_hold_stats[CPUIDLE_STATE_MAX];

/* Interrupts disabled, RCU watching on entry and on return: one halt with RCU idle. */
static __cpuidle void emu_idle_halt(void)
{
	ct_cpuidle_enter();
	emu_arch_wait_for_irq();
	ct_cpuidle_exit();
}

/*
 * Just woken (interrupts disabled, RCU watching): stay halted for @latency_ns
 * from now, less what earlier holds overpaid.
 */
static noinline void emu_idle_pay_exit_latency(int index, u64 latency_ns)
{
	struct emu_waker *w = this_cpu_ptr(&emu_wakers);
	s64 *credit = this_cpu_ptr(&emu_hold_credit_ns);
	s64 owed = (s64)latency_ns - *credit;
	u64 start = ktime_get_ns(), now = start, end;

	if (owed < (s64)EMU_MIN_HOLD_NS) {
		*credit -= latency_ns;	/* paid ahead by an earlier hold */
		atomic64_inc(&emu_hold_stats[index].holds);
		atomic64_sub(latency_ns, &emu_hold_stats[index].late_ns);
		return;
	}
	end = start + owed;
	emu_waker_arm(w, start, end);
	while (!emu_waker_done(w, now, end)) {
		emu_idle_halt();
		now = ktime_get_ns();
	}
	hrtimer_try_to_cancel(&w->timer);
	if (emu_exit_latency_paid)
		emu_exit_latency_paid();
	*credit = min_t(s64, (s64)(now - start) - owed, EMU_MAX_HOLD_CREDIT_NS);
	atomic64_inc(&emu_hold_stats[index].holds);
	atomic64_add(now - start, &emu_hold_stats[index].held_ns);
	atomic64_add((s64)(now - start) - (s64)latency_ns, &emu_hold_stats[index].late_ns);
}

/*
 * Every state has CPUIDLE_FLAG_RCU_IDLE: the core calls this with RCU
 * watching and interrupts disabled; it must return with interrupts disabled.
 */
static __cpuidle int emu_idle_enter(struct cpuidle_device *dev,
				    struct cpuidle_driver *drv, int index)
{
	u64 latency_ns = drv->states[index].exit_latency_ns;

	if (tif_need_resched())
		return index;
	emu_idle_halt();
	if (READ_ONCE(emu_faithful) && latency_ns >= EMU_MIN_HOLD_NS) {
		instrumentation_begin();
		emu_idle_pay_exit_latency(index, latency_ns);
		instrumentation_end();
	}
	return index;
}

static struct cpuidle_driver emu_idle_driver = {
	.name = "lisa_emu_cpuidle",
	.owner = THIS_MODULE,
};

static const struct emu_idle_table *emu_find_table(const char *name)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(emu_idle_tables); i++)
		if (sysfs_streq(name, emu_idle_tables[i].name))
			return &emu_idle_tables[i];
	return NULL;
}

static void emu_fill_state(struct cpuidle_state *s, const struct emu_idle_state *e)
{
	strscpy(s->name, e->name, CPUIDLE_NAME_LEN);
	strscpy(s->desc, e->desc, CPUIDLE_DESC_LEN);
	s->exit_latency = e->exit_latency_us;
	s->target_residency = e->target_residency_us;
	s->flags = CPUIDLE_FLAG_RCU_IDLE;	/* ->enter() tells RCU itself around each halt */
	s->enter = emu_idle_enter;
}

#ifdef CONFIG_ARM64
/* drivers/cpuidle/dt_idle_states.h, a header private to drivers/cpuidle */
int dt_init_idle_driver(struct cpuidle_driver *drv, const struct of_device_id *matches,
			unsigned int start_idx);

static const struct of_device_id emu_idle_state_match[] = {
	{ .compatible = "arm,idle-state", .data = emu_idle_enter },
	{ },
};

static DEFINE_PER_CPU(struct cpuidle_driver *, emu_dt_drivers);

static void emu_dt_unregister(void)
{
	int cpu;

	for_each_possible_cpu(cpu) {
		struct cpuidle_driver *drv = per_cpu(emu_dt_drivers, cpu);

		if (!drv)
			continue;
		cpuidle_unregister(drv);
		kfree(drv);
		per_cpu(emu_dt_drivers, cpu) = NULL;
	}
}

/* One driver per CPU (clusters may have different states), as cpuidle-psci registers them. */
static int emu_dt_register(void)
{
	int cpu, i, ret;

	for_each_possible_cpu(cpu) {
		struct cpuidle_driver *drv = kzalloc(sizeof(*drv), GFP_KERNEL);

		if (!drv) {
			emu_dt_unregister();
			return -ENOMEM;
		}
		drv->name = "lisa_emu_cpuidle";
		drv->owner = THIS_MODULE;
		drv->cpumask = (struct cpumask *)cpumask_of(cpu);
		/* state 0: WFI, as cpuidle-psci and cpuidle-arm define it */
		strscpy(drv->states[0].name, "WFI", CPUIDLE_NAME_LEN);
		strscpy(drv->states[0].desc, "ARM WFI", CPUIDLE_DESC_LEN);
		drv->states[0].exit_latency = 1;
		drv->states[0].target_residency = 1;
		drv->states[0].enter = emu_idle_enter;
		ret = dt_init_idle_driver(drv, emu_idle_state_match, 1);
		if (ret <= 0) {
			pr_err("lisa_emu_cpuidle: CPU%d: no idle states in the device tree (%d)\n", cpu, ret);
			kfree(drv);
			emu_dt_unregister();
			return ret ? : -ENODEV;
		}
		for (i = 0; i < drv->state_count; i++) {
			drv->states[i].flags |= CPUIDLE_FLAG_RCU_IDLE;	/* as emu_fill_state() */
			drv->states[i].enter = emu_idle_enter;
		}
		ret = cpuidle_register(drv, NULL);
		if (ret) {
			pr_err("lisa_emu_cpuidle: CPU%d: cpuidle_register failed: %d\n", cpu, ret);
			kfree(drv);
			emu_dt_unregister();
			return ret;
		}
		per_cpu(emu_dt_drivers, cpu) = drv;
	}
	pr_info("lisa_emu_cpuidle: device-tree idle states on every CPU (emulated over WFI), timing=%s\n",
		emu_faithful ? "faithful" : "decisions");
	return 0;
}

/* The states' names for the holds file: the first CPU's driver (the stats are per state index). */
static struct cpuidle_driver *emu_names_driver(void)
{
	return sysfs_streq(table, "dt") ? per_cpu(emu_dt_drivers, cpumask_first(cpu_possible_mask))
					: &emu_idle_driver;
}
#else
static int emu_dt_register(void)
{
	pr_err("lisa_emu_cpuidle: table=dt needs an arm64 kernel\n");
	return -EINVAL;
}

static void emu_dt_unregister(void) { }

static struct cpuidle_driver *emu_names_driver(void)
{
	return &emu_idle_driver;
}
#endif

static struct dentry *emu_debugfs_dir;

/* /sys/kernel/debug/lisa_emu_cpuidle/holds: "<state> <holds> <held_ns> <late_ns>" per state. */
static int emu_holds_show(struct seq_file *m, void *unused)
{
	struct cpuidle_driver *drv = emu_names_driver();
	int i;

	for (i = 0; drv && i < drv->state_count; i++)
		seq_printf(m, "%s %lld %lld %lld\n", drv->states[i].name,
			   (long long)atomic64_read(&emu_hold_stats[i].holds),
			   (long long)atomic64_read(&emu_hold_stats[i].held_ns),
			   (long long)atomic64_read(&emu_hold_stats[i].late_ns));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(emu_holds);

static void emu_debugfs_init(void)
{
	emu_debugfs_dir = debugfs_create_dir("lisa_emu_cpuidle", NULL);
	debugfs_create_file("holds", 0444, emu_debugfs_dir, NULL, &emu_holds_fops);
}

static int __init emu_table_register(void)
{
	const struct emu_idle_table *t = emu_find_table(table);
	int first = 0, i, ret;

	if (!t) {
		pr_err("lisa_emu_cpuidle: unknown table '%s'\n", table);
		return -EINVAL;
	}
	if (poll_state) {
		cpuidle_poll_state_init(&emu_idle_driver);
		first = 1;
	}
	for (i = 0; i < t->count && first + i < CPUIDLE_STATE_MAX; i++)
		emu_fill_state(&emu_idle_driver.states[first + i], &t->states[i]);
	emu_idle_driver.state_count = first + i;

	ret = cpuidle_register(&emu_idle_driver, NULL);
	if (ret) {
		pr_err("lisa_emu_cpuidle: cpuidle_register failed: %d\n", ret);
		return ret;
	}
	pr_info("lisa_emu_cpuidle: %s table, %d states (emulated over HLT), timing=%s\n",
		t->name, emu_idle_driver.state_count, emu_faithful ? "faithful" : "decisions");
	return 0;
}

static int __init emu_idle_init(void)
{
	int ret, cpu;

	for_each_possible_cpu(cpu)
		emu_waker_init(per_cpu_ptr(&emu_wakers, cpu));
	emu_exit_latency_paid = __symbol_get(EMU_EXIT_LATENCY_PAID);
	if (!emu_exit_latency_paid)
		pr_warn("lisa_emu_cpuidle: no %s() (board-support patch 0002): a woken task is charged the exit latency as runtime\n",
			EMU_EXIT_LATENCY_PAID);
	ret = sysfs_streq(table, "dt") ? emu_dt_register() : emu_table_register();
	if (ret) {
		if (emu_exit_latency_paid)
			__symbol_put(EMU_EXIT_LATENCY_PAID);
		return ret;
	}
	emu_debugfs_init();
	return 0;
}

static void __exit emu_idle_exit(void)
{
	int cpu;

	if (sysfs_streq(table, "dt"))
		emu_dt_unregister();
	else
		cpuidle_unregister(&emu_idle_driver);
	for_each_possible_cpu(cpu)
		hrtimer_cancel(&per_cpu_ptr(&emu_wakers, cpu)->timer);
	debugfs_remove_recursive(emu_debugfs_dir);
	if (emu_exit_latency_paid)
		__symbol_put(EMU_EXIT_LATENCY_PAID);
}

module_init(emu_idle_init);
module_exit(emu_idle_exit);
MODULE_DESCRIPTION("lisa-ext: real SoC idle-state tables emulated over HLT or WFI, exit latencies paid");
MODULE_LICENSE("GPL");
