// SPDX-License-Identifier: GPL-2.0
/*
 * lisa-ext platform emulation: a cpufreq driver exposing a real SoC's OPP
 * table on an x86 guest (QEMU TCG) that has no frequency scaling.
 *
 * The OPP frequencies and the transition latency are copied from the SoC's
 * device tree. Setting an OPP only records it: the vCPU keeps running at
 * whatever speed QEMU gives it.
 *
 * What is real: the governors' decisions (schedutil through ->fast_switch,
 * ondemand/conservative/userspace through ->target_index), the policy limits,
 * the cpu_frequency trace events (emitted by the cpufreq core for both paths),
 * the stats in policyN/stats. What is not: the performance and the energy of
 * an OPP.
 *
 * Frequency invariance: the guest's CPUs have no APERF/MPERF, so nothing scales
 * PELT utilisation by frequency. With the board-support patch
 * (kernels/patches/board/0001-x86-aperfmperf-...) this driver feeds the
 * scheduler's arch_freq_scale with cur/max of its policy at every change, as
 * the cpufreq core does on arm64, so schedutil behaves as on the SoC whose
 * table is loaded (utilisation mapped onto the maximum frequency). Without the
 * patch, or with invariance=0, schedutil maps utilisation relative to the
 * current OPP, as on any platform without invariance.
 *
 * Parameters:
 *   opps=rk3399-little[,rk3399-big]  OPP table per package: package k of the
 *                                    guest (-smp sockets=N) gets the k-th
 *                                    table, the last one repeats
 *   tables: rk3399-little, rk3399-big (rk3399.dtsi), hi3660-little
 *           (hi3660.dtsi Cortex-A53 cluster)
 *   domain=package|cpu  CPUs sharing a policy (default: package, like a
 *                       cluster sharing a clock)
 *   invariance=1|0      provide frequency invariance (default 1; needs the
 *                       board-support patch)
 */

#include <linux/cpu.h>
#include <linux/cpufreq.h>
#include <linux/init.h>
#include <linux/kernel.h>
#include <linux/math64.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/sched/topology.h>
#include <linux/topology.h>

struct emu_opp_table {
	const char *name;
	const unsigned int *khz;
	int count;
	unsigned int transition_latency_ns;
};

static const unsigned int rk3399_little_khz[] = {
	408000, 600000, 816000, 1008000, 1200000, 1416000,
};
static const unsigned int rk3399_big_khz[] = {
	408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000,
};
static const unsigned int hi3660_little_khz[] = {
	533000, 999000, 1402000, 1709000, 1844000,
};

static const struct emu_opp_table emu_opp_tables[] = {
	{ "rk3399-little", rk3399_little_khz, ARRAY_SIZE(rk3399_little_khz), 40000 },
	{ "rk3399-big", rk3399_big_khz, ARRAY_SIZE(rk3399_big_khz), 40000 },
	{ "hi3660-little", hi3660_little_khz, ARRAY_SIZE(hi3660_little_khz), 300000 },
};

#define EMU_MAX_TABLES 4

static char *opps = "rk3399-little";
module_param(opps, charp, 0444);
MODULE_PARM_DESC(opps, "comma-separated OPP tables, one per package");

static char *domain = "package";
module_param(domain, charp, 0444);
MODULE_PARM_DESC(domain, "CPUs sharing a policy: package or cpu");

static bool invariance = true;
module_param(invariance, bool, 0444);
MODULE_PARM_DESC(invariance, "feed the scheduler's frequency invariance (needs the board-support patch)");

static const struct emu_opp_table *emu_tables[EMU_MAX_TABLES];
static int emu_table_count;
static bool emu_per_cpu;
/*
 * From the board-support patch (kernels/patches/board/0001-x86-aperfmperf-*):
 * weak, so that the module also loads, without invariance, on a kernel
 * without it.
 */
extern bool arch_enable_cpufreq_freq_invariance(void) __weak;
extern void arch_disable_cpufreq_freq_invariance(void) __weak;

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

static const struct emu_opp_table *emu_table_for(unsigned int cpu)
{
	int k = emu_per_cpu ? cpu : topology_logical_package_id(cpu);

	return emu_tables[min(k, emu_table_count - 1)];
}

/* "Run" the policy's CPUs at @khz; called under the policy's locks. */
static void emu_set_opp(struct cpufreq_policy *policy, unsigned int khz)
{
	struct emu_policy *ep = policy->driver_data;

	WRITE_ONCE(ep->cur_khz, khz);
#if defined(CONFIG_X86_64) && defined(CONFIG_SMP)
	if (emu_owns_freq_scale) {
		unsigned long scale = div_u64((u64)khz << SCHED_CAPACITY_SHIFT, ep->max_khz);
		int cpu;

		/* ->cpus, not ->related_cpus: ->init() runs before the core sets the latter */
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

	if (emu_per_cpu)
		cpumask_copy(policy->cpus, cpumask_of(policy->cpu));
	else
		cpumask_copy(policy->cpus, topology_core_cpumask(policy->cpu));

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
	.attr = cpufreq_generic_attr,
};

/*
 * Take arch_freq_scale over before the policies exist: each policy's first
 * OPP then sets its CPUs' scale (emu_cpufreq_init()), so none is left stale.
 */
static void emu_take_freq_scale(void)
{
	if (!invariance)
		return;
	if (arch_enable_cpufreq_freq_invariance)
		emu_owns_freq_scale = arch_enable_cpufreq_freq_invariance();
	else
		pr_warn("lisa_emu_cpufreq: kernel lacks the board-support patch: no frequency invariance\n");
}

static void emu_release_freq_scale(void)
{
	if (emu_owns_freq_scale)
		arch_disable_cpufreq_freq_invariance();
	emu_owns_freq_scale = false;
}

static int __init emu_cpufreq_module_init(void)
{
	int ret = emu_parse_params();

	if (ret)
		return ret;
	emu_take_freq_scale();
	ret = cpufreq_register_driver(&emu_cpufreq_driver);
	if (ret) {
		pr_err("lisa_emu_cpufreq: cpufreq_register_driver failed: %d\n", ret);
		emu_release_freq_scale();
		return ret;
	}
	pr_info("lisa_emu_cpufreq: opps=%s domain=%s invariance=%s (emulated: no real frequency change)\n",
		opps, domain, emu_owns_freq_scale ? "driver" : "none");
	return 0;
}

static void __exit emu_cpufreq_module_exit(void)
{
	cpufreq_unregister_driver(&emu_cpufreq_driver);
	emu_release_freq_scale();
}

module_init(emu_cpufreq_module_init);
module_exit(emu_cpufreq_module_exit);
MODULE_DESCRIPTION("lisa-ext: real SoC OPP tables for a guest without cpufreq");
MODULE_LICENSE("GPL");
