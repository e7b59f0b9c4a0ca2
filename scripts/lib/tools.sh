# shellcheck shell=bash
# Sourced by scripts/setup, scripts/test, scripts/check-deploy and scripts/check-demo: where the
# checking tools are found (scripts/setup installs them), and what a missing one means. On a
# developer's machine a check whose tool is missing says so and is skipped; under CI (CI=true)
# it fails, so that a green CI run has checked everything it names.
# Callers cd to the repository's root first.

deploy_venv=target/deploy-venv

in_ci() {
  case "${CI:-}" in true | 1 | yes) return 0 ;; *) return 1 ;; esac
}

# Prints the path of checking tool $1, or nothing (and fails) if it is not installed.
tool_path() {
  local found=
  case $1 in
    hadolint | kubernetes-validate) [ -x "$deploy_venv/bin/$1" ] && found=$PWD/$deploy_venv/bin/$1 ;;
    kubectl) found=$(command -v kubectl || true)
      [ -z "$found" ] && [ -x "$deploy_venv/bin/kubectl" ] && found=$PWD/$deploy_venv/bin/kubectl ;;
    chromium) found=${LEASEHOLD_CHROMIUM:-$(command -v chromium || true)} ;;
    yaml-python) # a Python that parses YAML: the deploy venv's (kubernetes-validate needs PyYAML)
      for python in "$PWD/$deploy_venv/bin/python" python3; do
        if "$python" -c 'import yaml' 2>/dev/null; then found=$(command -v "$python"); break; fi
      done ;;
    nats-server) found=$(command -v nats-server || true)
      [ -z "$found" ] && [ -x /usr/sbin/nats-server ] && found=/usr/sbin/nats-server ;;
    *) found=$(command -v "$1" || true) ;;
  esac
  [ -n "$found" ] || return 1
  echo "$found"
}

# `tool_missing WHO WHAT`: WHO (the script) could not check WHAT. A warning on a developer's
# machine (returns 0); under CI an error (returns 1). Use as `tool_missing … || failed=1`.
tool_missing() {
  if in_ci; then
    echo "$1: FAILED (CI): $2; scripts/setup installs it" >&2
    return 1
  fi
  echo "$1: $2 (run scripts/setup to install it; CI fails here)" >&2
}
