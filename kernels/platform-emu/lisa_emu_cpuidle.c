// SPDX-License-Identifier: GPL-2.0
/*
 * lisa-ext platform emulation: a cpuidle driver exposing a real SoC's
 * idle-state table on a guest (QEMU TCG) that has no idle states.
 *
 * x86: the tables below, every state entered with HLT. arm64 (table=dt, the
 * default there): each CPU's idle states from the guest's device tree (the
 * SoC's arm,idle-state nodes that lisa_ext.vboard.devicetree put there),
 * turned into cpuidle states by the kernel's own dt_init_idle_driver() as
 * cpuidle-psci does, one driver per CPU, every state entered with WFI. Not
 * through PSCI CPU_SUSPEND: under QEMU 7.2's TCG a guest whose CPUs idle
 * there stops taking timer interrupts (every CPU halted in the HVC, jiffies
 * frozen), so the board keeps cpuidle-psci from initialising
 * (initcall_blacklist) and loads this driver instead; the sysfs states,
 * names, latencies and residencies are the same.
 *
 * The table only tells the cpuidle core and
 * its governors (menu, teo) what each state would cost on the SoC: its name,
 * exit latency and target residency, copied from the SoC's device tree
 * (exit latency = entry-latency-us + exit-latency-us, target residency =
 * min-residency-us, as drivers/cpuidle/dt_idle_states.c computes them).
 *
 * What is real: the governors' state selection, the residency bookkeeping,
 * the cpu_idle / cpu_idle_miss trace events, the usage/time/above/below
 * counters in sysfs. What is not: entering a "deep" state saves nothing and
 * costs nothing beyond HLT, the wakeup latency is QEMU's, not the SoC's, and
 * no local timer stops (CPUIDLE_FLAG_TIMER_STOP is not set, no broadcast
 * timer is involved). Idle misses therefore measure the governors' predictions
 * against the emulated table, not a real SoC's energy or latency.
 *
 * Parameters:
 *   table=rk3399          Rockchip RK3399 (rk3399-base.dtsi, both clusters)
 *   table=hi3660-little   HiSilicon Kirin 960 Cortex-A53 cluster (hi3660.dtsi)
 *   table=dt              arm64: each CPU's cpu-idle-states from the device tree
 *   poll_state=1          make state 0 the kernel's polling state instead of
 *                         a HLT-based "WFI" (x86 drivers do that; Arm does not)
 */

#include <linux/cpuidle.h>
#include <linux/init.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/sched.h>
#include <linux/string.h>
#include <linux/irqflags.h>
#include <linux/of.h>
#include <linux/slab.h>

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

/*
 * Called with RCU idle (no CPUIDLE_FLAG_RCU_IDLE), hence __cpuidle and no
 * instrumentable calls. Must return with interrupts disabled.
 */
static __cpuidle int emu_idle_enter(struct cpuidle_device *dev,
				    struct cpuidle_driver *drv, int index)
{
#ifdef CONFIG_ARM64
	/* cpu_do_idle() without pseudo-NMI priority masking, which the board's kernel lacks */
	dsb(sy);
	wfi();
#else
	if (!tif_need_resched()) {
		raw_safe_halt();
		raw_local_irq_disable();
	}
#endif
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
		for (i = 1; i < drv->state_count; i++) {
			/* entered with WFI here: the cpuidle core does the RCU bookkeeping */
			drv->states[i].flags &= ~CPUIDLE_FLAG_RCU_IDLE;
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
	pr_info("lisa_emu_cpuidle: device-tree idle states on every CPU (emulated over WFI)\n");
	return 0;
}
#else
static int emu_dt_register(void)
{
	pr_err("lisa_emu_cpuidle: table=dt needs an arm64 kernel\n");
	return -EINVAL;
}

static void emu_dt_unregister(void) { }
#endif

static int __init emu_idle_init(void)
{
	const struct emu_idle_table *t = emu_find_table(table);
	int first = 0, i, ret;

	if (sysfs_streq(table, "dt"))
		return emu_dt_register();
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
	pr_info("lisa_emu_cpuidle: %s table, %d states (emulated over HLT)\n",
		t->name, emu_idle_driver.state_count);
	return 0;
}

static void __exit emu_idle_exit(void)
{
	if (sysfs_streq(table, "dt"))
		emu_dt_unregister();
	else
		cpuidle_unregister(&emu_idle_driver);
}

module_init(emu_idle_init);
module_exit(emu_idle_exit);
MODULE_DESCRIPTION("lisa-ext: real SoC idle-state tables emulated over HLT");
MODULE_LICENSE("GPL");
