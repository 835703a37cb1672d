// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// The cgroup id a task is keyed on, shared by the BPF programs: the cpu
// controller's cgroup on cgroup v1 (where the lab and observe put tenants),
// the unified one on v2. Include after <bpf/bpf_core_read.h>; the program
// declares `const volatile bool cgroup_v1` and its own `struct task_struct`
// with a `struct css_set *cgroups` field.
#ifndef ONTIME_CGROUP_ID_H
#define ONTIME_CGROUP_ID_H

struct kernfs_node { __u64 id; } __attribute__((preserve_access_index));
struct cgroup { struct kernfs_node *kn; } __attribute__((preserve_access_index));
struct cgroup_subsys_state { struct cgroup *cgroup; } __attribute__((preserve_access_index));
struct css_set {
    struct cgroup_subsys_state *subsys[16];
    struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));

enum cgroup_subsys_id { cpu_cgrp_id = 0 };

static __always_inline __u64 css_set_cgroup_id(struct css_set *cgroups, bool v1)
{
    struct cgroup *cg;
    if (v1) {
        int idx = bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id);
        if (idx < 0 || idx >= 16)
            return 0;
        cg = BPF_CORE_READ(cgroups, subsys[idx], cgroup);
    } else {
        cg = BPF_CORE_READ(cgroups, dfl_cgrp);
    }
    if (!cg)
        return 0;
    return BPF_CORE_READ(cg, kn, id);
}

#endif
