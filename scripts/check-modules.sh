#!/usr/bin/env bash
# check-modules.sh: does, for every nested module (every go.mod below the
# root), what a user of it does: from a new module outside the repository,
# with no workspace, `go get MODULE@COMMIT` (HEAD's commit) and build a
# program that imports each of its packages, and its commands. The
# repository is served from a bare copy of HEAD's history in place of
# GitHub (scripts/modules-lib.sh), so what is checked is what users would
# get once HEAD is pushed. Fails, saying what to run, when a nested module
# requires a library version that is no commit of this branch, or one that
# lacks what the module uses, or keeps a replace directive; and when go.work
# lacks a nested module. docs/MODULES.md has the rhythm that keeps it
# green.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
. scripts/modules-lib.sh

if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
	echo "check-modules: this clone is shallow; the check needs the history (git fetch --unshallow)" >&2
	exit 1
fi
rev=$(git rev-parse HEAD)
short=${rev:0:12}
if ! git diff --quiet HEAD -- go.work '*go.mod' '*go.sum' 2>/dev/null; then
	echo "check-modules: note: this checks HEAD ($short); uncommitted changes to go.work, go.mod or go.sum files are not seen"
fi
mods=$(nested_modules "$rev")
if [ -z "$mods" ]; then
	echo "check-modules: no nested module"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
serve_repo "$tmp" "$rev"
outside_go "$tmp"
# Each user module starts from the nested module's committed go.sum,
# which checks what is fetched; the checksum database is not asked, so
# that the check runs offline (it checks resolution, not the database).
export GOSUMDB=off
# The module cache here is new each run, so its directories differ from
# run to run: without -trimpath, every compile would miss the build cache.
export GOFLAGS="$GOFLAGS -trimpath"
mkdir -p "$tmp/bin"

# The workspace's modules and replacements, as committed.
used="" replaced=""
if git cat-file -e "$rev:go.work" 2>/dev/null; then
	git show "$rev:go.work" >"$tmp/go.work"
	used=$(work_facts "$tmp/go.work" | awk '$1 == "use" { print $2 }')
	replaced=$(work_facts "$tmp/go.work" | awk '$1 == "replace" { print $2, $3 }')
fi

passed=0 failed=0
# fail reports one problem of module $m; the module counts once.
failing=""
fail() {
	echo "FAIL: $*"
	if [ "$failing" != "$m" ]; then
		failing=$m
		failed=$((failed + 1))
	fi
}
indent() { sed 's/^/    /'; }
bump="run scripts/bump-modules.sh and commit what it changes"

for m in $mods; do
	path=$(module_path "$m")
	git show "$rev:$m/go.mod" >"$tmp/go.mod.txt"
	problems=()
	declared=$(awk '$1 == "module" { gsub(/"/, "", $2); print $2; exit }' "$tmp/go.mod.txt")
	if [ "$declared" != "$path" ]; then
		problems+=("$m/go.mod declares the module $declared; in this directory it can only be fetched as $path")
	fi
	if ! grep -qx "$m" <<<"$used"; then
		problems+=("go.work does not use ./$m, so in-repo builds of it do not see the library's working tree; $bump (or go work use ./$m)")
	fi
	lib=""
	while read -r kind p v; do
		case $kind in
		replace)
			is_ours "$p" &&
				problems+=("$m/go.mod replaces $p, which a dependent ignores (the version it requires must resolve on its own); develop through go.work instead: $bump")
			;;
		require)
			is_ours "$p" || continue
			name=${p#"$LIB_MODULE"}
			name=${name#/}
			name=${name:-shardcast}
			[ "$p" = "$LIB_MODULE" ] && lib=$v
			if [ "$v" = "$PLACEHOLDER" ]; then
				problems+=("$m requires $name at $v, a placeholder only a replace directive resolves; $bump")
				continue
			fi
			if ! grep -qx "$p $v" <<<"$replaced"; then
				problems+=("go.work does not replace $name $v (required by $m) with its directory, so workspace builds would fetch that version from GitHub; $bump")
			fi
			hash=$(pseudo_commit "$v")
			if [ -z "$hash" ]; then
				tag=$v
				[ "$p" != "$LIB_MODULE" ] && tag="${p#"$LIB_MODULE"/}/$v"
				if ! git merge-base --is-ancestor "refs/tags/$tag" "$rev" 2>/dev/null; then
					problems+=("$m requires $name at $v, but no tag $tag is on this branch; $bump")
				fi
				continue
			fi
			if ! c=$(git rev-parse -q --verify "$hash^{commit}" 2>/dev/null) || ! git merge-base --is-ancestor "$c" "$rev"; then
				problems+=("$m requires $name at $hash, which is not on this branch (rebased or squashed away, or from another branch); $bump")
				continue
			fi
			if [ "$(commit_time "$c")" != "$(pseudo_time "$v")" ]; then
				problems+=("$m requires $name at $v, whose time is not commit $hash's ($(commit_time "$c")); $bump")
			fi
			dir=${p#"$LIB_MODULE"}
			dir=${dir#/}
			if [ -n "$dir" ] && ! git cat-file -e "$c:$dir/go.mod" 2>/dev/null; then
				problems+=("$m requires $name at $hash, where that module does not exist yet; $bump")
			fi
			;;
		esac
	done < <(mod_facts "$tmp/go.mod.txt")
	if [ -z "$lib" ]; then
		problems+=("$m does not require $LIB_MODULE; $bump")
	fi
	if [ ${#problems[@]} -gt 0 ]; then
		for p in "${problems[@]}"; do fail "$p"; done
		continue
	fi

	# What a user does.
	start=$SECONDS
	user=$tmp/user-${m//\//-}
	mkdir -p "$user"
	(cd "$user" && go mod init example.com/user >/dev/null 2>&1)
	# The module's committed checksums check what is fetched (the
	# checksum database is not asked: see GOSUMDB above).
	git show "$rev:$m/go.sum" >"$user/go.sum" 2>/dev/null || true
	if ! out=$(cd "$user" && go get "$path@$rev" 2>&1); then
		fail "go get $path@$short failed:"
		echo "$out" | indent
		continue
	fi
	what="it requires shardcast $lib"
	libc=$(pseudo_commit "$lib")
	[ -n "$libc" ] && what="$what (commit $libc of $(git show -s --format=%cs "$libc"))"
	pkgs=$(cd "$user" && go list -e -f '{{if .GoFiles}}{{.Name}} {{.ImportPath}}{{end}}' "$path/..." 2>"$tmp/list.err") || {
		fail "go list $path/... failed:"
		indent <"$tmp/list.err"
		continue
	}
	imports=$(awk '$1 != "main" { print $2 }' <<<"$pkgs" | grep -vE '/internal(/|$)' || true)
	cmds=$(awk '$1 == "main" { print $2 }' <<<"$pkgs")
	{
		echo "// A user's program: imports every package of $path."
		echo "package main"
		echo
		for p in $imports; do echo "import _ \"$p\""; done
		echo
		echo "func main() {}"
	} >"$user/main.go"
	ok=1
	if [ -n "$imports" ] && ! out=$(cd "$user" && go build -o /dev/null . 2>&1); then
		fail "$m at $short does not build for a user: $what, which lacks what $m uses. Commit the library change first, then $bump. The build said:"
		echo "$out" | indent
		ok=0
	fi
	# shellcheck disable=SC2086 # one argument per command
	if [ "$ok" = 1 ] && [ -n "$cmds" ] && ! out=$(cd "$user" && go build -o "$tmp/bin/" $cmds 2>&1); then
		fail "the commands of $m at $short do not build for a user: $what, which lacks what they use. Commit the library change first, then $bump. The build said:"
		echo "$out" | indent
		ok=0
	fi
	if [ "$ok" = 1 ]; then
		echo "ok   $m: go get $path@$short builds $(wc -w <<<"$imports") package(s) and $(wc -w <<<"$cmds") command(s); $what ($((SECONDS - start)) s)"
		passed=$((passed + 1))
	fi
done
echo "modules: $passed passed, $failed failed"
[ "$failed" = 0 ]
