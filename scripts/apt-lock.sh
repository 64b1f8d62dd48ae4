# Sourced by the scripts that install Debian packages: one apt-get at a
# time on this machine, since `make test` prepares the engine and the test
# tools at once and apt refuses a second run while the first holds its lock.
# apt_unlock unlocks explicitly: a service a package starts inherits the
# descriptor, and would otherwise hold the lock for as long as it runs.
apt_lock() {
  exec 8>"${TMPDIR:-/tmp}/proctor-apt.lock"
  flock 8
}
apt_unlock() {
  flock -u 8
  exec 8>&-
}
