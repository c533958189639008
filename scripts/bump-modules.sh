#!/usr/bin/env bash
# bump-modules.sh [COMMIT]: makes every nested module (every go.mod below
# the root, committed or not) require the library, and the other nested
# modules it requires, at the pseudo-version of COMMIT (default HEAD),
# then tidies its go.mod and go.sum without the workspace, as a user's
# build sees them. It removes replace directives of shardcast modules from
# the nested go.mod files and brings go.work up to date: it uses every
# module, and replaces each required version of a shardcast module by its
# directory. COMMIT must be on this branch: commit the library change
# first, run this, then commit what it changed (docs/MODULES.md). The
# repository is served to the go command from a bare copy of COMMIT's
# history (scripts/modules-lib.sh): nothing is fetched from GitHub.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
. scripts/modules-lib.sh

rev=$(git rev-parse --verify -q "${1:-HEAD}^{commit}") || {
	echo "bump-modules: ${1:-HEAD} is not a commit" >&2
	exit 2
}
if ! git merge-base --is-ancestor "$rev" HEAD; then
	echo "bump-modules: ${rev:0:12} is not on this branch; a dependent could not fetch it from main" >&2
	exit 1
fi
if ! git diff --quiet "$rev" -- . ':!*go.mod' ':!*go.sum' ':!go.work' ':!go.work.sum'; then
	echo "bump-modules: note: the working tree differs from ${rev:0:12} beyond go.mod, go.sum and go.work files; the nested modules will require ${rev:0:12}, not those changes"
fi

mods=$(nested_modules)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
serve_repo "$tmp" "$rev"
# The workspace commands below run in the caller's settings.
work() { env -u GOWORK -u GOFLAGS -u GOPATH -u GOMODCACHE -u GOPROXY -u GOPRIVATE go work "$@"; }
outside_go "$tmp"

# version PATH: the version Go gives the module PATH at COMMIT (its
# pseudo-version), asked of the served copy from a scratch module.
mkdir -p "$tmp/scratch"
(cd "$tmp/scratch" && go mod init scratch >/dev/null 2>&1)
version() { (cd "$tmp/scratch" && go list -m -f '{{.Version}}' "$1@$rev"); }

for m in $mods; do
	old=""
	targets=("$LIB_MODULE")
	while read -r kind p v; do
		is_ours "$p" || continue
		case $kind in
		replace) (cd "$m" && go mod edit -dropreplace="$p${v:+@$v}") ;;
		require)
			[ "$p" = "$LIB_MODULE" ] && old=$v
			[ "$p" != "$LIB_MODULE" ] && targets+=("$p")
			;;
		esac
	done < <(mod_facts "$m/go.mod")
	for p in "${targets[@]}"; do
		if ! git cat-file -e "$rev:$(module_dir "$p")/go.mod" 2>/dev/null; then
			echo "bump-modules: $m requires $p, which has no go.mod at ${rev:0:12}; commit it first" >&2
			exit 1
		fi
		v=$(version "$p")
		(cd "$m" && go mod edit -require="$p@$v")
	done
	# Tidy without the workspace: the go.sum a GOWORK=off build needs.
	if ! out=$(cd "$m" && go mod tidy 2>&1); then
		echo "bump-modules: go mod tidy in $m:" >&2
		echo "$out" | sed 's/^/    /' >&2
		exit 1
	fi
	echo "$m: shardcast ${old:-(none)} -> $(version "$LIB_MODULE")"
done

# go.work uses every module, and replaces every version of a shardcast
# module that a nested module requires with its directory: a workspace
# module still brings the versions required of it into the module graph,
# whose go.mod files the go command would otherwise fetch from GitHub.
[ -f go.work ] || work init .
while read -r kind p v; do
	if [ "$kind" = replace ] && is_ours "$p"; then
		work edit -dropreplace="$p${v:+@$v}"
	fi
done < <(work_facts go.work)
used=$(work_facts go.work | awk '$1 == "use" { print $2 }')
for m in $mods; do
	if ! grep -qx "$m" <<<"$used"; then
		work use "./$m"
		echo "go.work: uses ./$m"
	fi
	while read -r kind p v; do
		if [ "$kind" = require ] && is_ours "$p"; then
			d=$(module_dir "$p")
			[ "$d" = . ] && d=""
			work edit -replace="$p@$v=./$d"
		fi
	done < <(mod_facts "$m/go.mod")
done
echo "bump-modules: done; commit the changes, then check with scripts/check-modules.sh"
