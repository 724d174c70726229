"""`dra-webhook report --kubeconfig | --in-cluster`: migration progress from the live cluster.

listing       paged lists and PolicyReport writes through kubernetes.aio (the only I/O)
tally         objects classified one at a time (app.offline's verdict), counts kept
policyreport  a namespace's totals as a wgpolicyk8s.io/v1alpha2 PolicyReport
progress      the progress bar, on a terminal only
run           the whole run: namespaces and DeviceClasses, every pod-bearing kind, reports
"""
