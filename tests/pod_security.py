"""What Kubernetes' Pod Security Standards (baseline, restricted; the current version of each control)
would refuse in a pod's spec, under the names the admission controller's warnings use ("host namespaces",
"hostPath volumes" ...). No cluster here: tests/integration/test_deploy.py checks the DaemonSet's pod with it.

From https://kubernetes.io/docs/concepts/security/pod-security-standards/ (Linux pods; the Windows-only
control is the hostProcess flag).
"""

from __future__ import annotations

from collections.abc import Iterator

BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
LEVELS = ("baseline", "restricted")


def containers(spec: dict) -> Iterator[dict]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(kind) or ()


def violations(spec: dict, level: str) -> set[str]:
    """The controls of ``level`` (baseline, or restricted: baseline's and its own) that ``spec`` breaks."""
    assert level in LEVELS
    found = _baseline(spec)
    if level == "restricted":
        found |= _restricted(spec)
    return found


def _baseline(spec: dict) -> set[str]:
    pod = spec.get("securityContext") or {}
    contexts = [c.get("securityContext") or {} for c in containers(spec)]
    every = [pod, *contexts]
    found = set()
    if any((c.get("windowsOptions") or {}).get("hostProcess") for c in every):
        found.add("hostProcess")
    if any(spec.get(key) for key in ("hostNetwork", "hostPID", "hostIPC")):
        found.add("host namespaces")
    if any(c.get("privileged") for c in contexts):
        found.add("privileged")
    if any(set((c.get("capabilities") or {}).get("add") or ()) - BASELINE_CAPABILITIES for c in contexts):
        found.add("non-default capabilities")
    if any("hostPath" in v for v in spec.get("volumes") or ()):
        found.add("hostPath volumes")
    if any(p.get("hostPort") for c in containers(spec) for p in c.get("ports") or ()):
        found.add("hostPort")
    if any((c.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost") for c in every):
        found.add("appArmorProfile")
    for options in ((c.get("seLinuxOptions") or {}) for c in every):
        if options.get("type", "") not in SELINUX_TYPES or options.get("user") or options.get("role"):
            found.add("seLinuxOptions")
    if any(c.get("procMount", "Default") != "Default" for c in contexts):
        found.add("procMount")
    if any((c.get("seccompProfile") or {}).get("type") == "Unconfined" for c in every):
        found.add("seccompProfile")
    if any(s.get("name") not in SAFE_SYSCTLS for s in pod.get("sysctls") or ()):
        found.add("forbidden sysctls")
    return found


def _restricted(spec: dict) -> set[str]:
    pod = spec.get("securityContext") or {}
    contexts = [c.get("securityContext") or {} for c in containers(spec)]
    found = set()
    for volume in spec.get("volumes") or ():
        if not set(volume) - {"name"} <= RESTRICTED_VOLUMES:
            found.add("restricted volume types")
    if any(c.get("allowPrivilegeEscalation") is not False for c in contexts):
        found.add("allowPrivilegeEscalation != false")
    # set on the pod and not unset by a container, or set by every container
    if not all(c.get("runAsNonRoot", pod.get("runAsNonRoot")) is True for c in contexts):
        found.add("runAsNonRoot != true")
    if pod.get("runAsUser") == 0 or any(c.get("runAsUser") == 0 for c in contexts):
        found.add("runAsUser=0")
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    if not all((c.get("seccompProfile") or {}).get("type", pod_seccomp) in ("RuntimeDefault", "Localhost")
               for c in contexts):
        found.add("seccompProfile")
    for context in contexts:
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or ()) or set(capabilities.get("add") or ()) - {"NET_BIND_SERVICE"}:
            found.add("unrestricted capabilities")
    return found
