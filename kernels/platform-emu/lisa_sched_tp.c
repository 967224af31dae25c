// SPDX-License-Identifier: GPL-2.0
/*
 * lisa-ext: the scheduler's overutilized state as a trace event.
 *
 * With energy-aware scheduling enabled, kernel/sched/fair.c keeps a root
 * domain's "overutilized" flag (a CPU's utilisation no longer fits its
 * capacity): while it is clear, wake-ups are placed by find_energy_efficient_cpu()
 * from the Energy Model; while it is set, the scheduler balances load as
 * without EAS. Every update goes through set_rd_overutilized(), which fires the
 * bare tracepoint sched_overutilized_tp (no trace event of its own, no update
 * while EAS is off). This module attaches to it and emits
 * lisa_ext:sched_overutilized (overutilized = 0 or 1), as LISA's sched_tp
 * module does, so that an analysis can tell the wake-ups EAS placed from the
 * others (lisa_ext.analysis.capacity_placement).
 *
 * The virtual boards have one root domain (every CPU), so the event carries no
 * span. The state before the first event of a trace is unknown.
 */

#include <linux/init.h>
#include <linux/module.h>
#include <linux/tracepoint.h>
#include <trace/events/sched.h>

#define CREATE_TRACE_POINTS
#include "lisa_sched_tp.h"

static void lisa_probe_overutilized(void *data, struct root_domain *rd, bool overutilized)
{
	trace_sched_overutilized(overutilized);
}

static int __init lisa_sched_tp_init(void)
{
	return register_trace_sched_overutilized_tp(lisa_probe_overutilized, NULL);
}

static void __exit lisa_sched_tp_exit(void)
{
	unregister_trace_sched_overutilized_tp(lisa_probe_overutilized, NULL);
	tracepoint_synchronize_unregister();
}

module_init(lisa_sched_tp_init);
module_exit(lisa_sched_tp_exit);
MODULE_DESCRIPTION("lisa-ext: the scheduler's overutilized state as a trace event");
MODULE_LICENSE("GPL");
