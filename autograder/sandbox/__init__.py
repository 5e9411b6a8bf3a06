"""Making a sandbox for a learner's code: bubblewrap's namespaces and read-only views, limits and the process's
end (`box`), a cgroup per sandbox that measures from outside (`cgroups`), the warm server that forks sandboxed
processes instead of starting each (`forkserver`), and what a GPU's vendor gives a sandbox (`gpu`)."""
