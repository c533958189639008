# Sourced by bump-modules.sh and check-modules.sh: which nested modules the
# repository has, how to serve the repository to the go command in place
# of GitHub, and the go settings of a user outside the repository.

LIB_MODULE=github.com/shardcast/shardcast
LIB_REMOTE=https://github.com/shardcast/shardcast
# The version Go writes for a module that only a replace directive makes
# resolvable: a dependent cannot fetch it.
PLACEHOLDER=v0.0.0-00010101000000-000000000000

# nested_modules [REV]: the directory, relative to the root, of every
# go.mod below the root (so a module added later is found too): those
# committed at REV, or, without REV, those of the working tree.
nested_modules() {
	if [ $# -gt 0 ]; then
		git ls-tree -r --name-only "$1"
	else
		git ls-files --cached --others --exclude-standard
	fi | grep -E '(^|/)go\.mod$' | grep -v '^go\.mod$' |
		grep -vE '(^|/)(testdata|vendor|node_modules)/' | sed 's|/go\.mod$||' | sort -u
}

# module_path DIR: the module path of the nested module in DIR.
module_path() { echo "$LIB_MODULE/$1"; }

# is_ours PATH: whether PATH is the library or one of its nested modules.
is_ours() { [[ $1 == "$LIB_MODULE" || $1 == "$LIB_MODULE"/* ]]; }

# mod_facts GOMOD, work_facts GOWORK: one line for each requirement
# ("require PATH VERSION"), each replaced module ("replace PATH
# [VERSION]") and each workspace module ("use DIR") of a go.mod or go.work
# file.
mod_facts() { go mod edit -json "$1" | json_facts; }
work_facts() { go work edit -json "$1" | json_facts; }
json_facts() {
	awk '
		/^\t"[A-Za-z]+": / { sec = $1 }
		{ v = $0; sub(/^[^:]*: "/, "", v); sub(/",?$/, "", v) }
		sec == "\"Require\":" && /"Path":/ { path = v }
		sec == "\"Require\":" && /"Version":/ { print "require", path, v }
		sec == "\"Use\":" && /"DiskPath":/ { sub(/^\.\//, "", v); print "use", v }
		sec == "\"Replace\":" && /"Old": \{/ { old = 1; op = ""; ov = "" }
		sec == "\"Replace\":" && old && /"Path":/ { op = v }
		sec == "\"Replace\":" && old && /"Version":/ { ov = v }
		sec == "\"Replace\":" && /"New": \{/ { old = 0; print "replace", op, ov }
	'
}

# module_dir PATH: the directory, relative to the root, of the shardcast
# module PATH ("." for the library).
module_dir() {
	local d=${1#"$LIB_MODULE"}
	d=${d#/}
	echo "${d:-.}"
}

# pseudo_commit VERSION: the abbreviated commit a pseudo-version names
# (nothing for a release version).
pseudo_commit() {
	echo "$1" | sed -nE 's/^v[0-9]+\.[0-9]+\.[0-9]+-(.*\.)?[0-9]{14}-([0-9a-f]{12})(\+incompatible)?$/\2/p'
}

# pseudo_time VERSION: the UTC commit time (yyyymmddhhmmss) a
# pseudo-version names.
pseudo_time() {
	echo "$1" | sed -nE 's/^v[0-9]+\.[0-9]+\.[0-9]+-(.*\.)?([0-9]{14})-[0-9a-f]{12}(\+incompatible)?$/\2/p'
}

# commit_time REV: REV's committer time in UTC as a pseudo-version writes it.
commit_time() { TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d%H%M%S "$1"; }

# serve_repo DIR REV: a bare repository DIR/shardcast.git whose main
# branch is REV (its history only) and which has the tags, and git
# settings, in the environment only (no file changes), that send every
# fetch of github.com/shardcast/shardcast there: what the go command gets
# is then what GitHub would serve once REV is pushed.
serve_repo() {
	local bare=$1/shardcast.git n=${GIT_CONFIG_COUNT:-0}
	git init -q --bare --initial-branch=main "$bare"
	git push -q --tags "$bare" "$2:refs/heads/main"
	export GIT_CONFIG_COUNT=$((n + 1))
	export "GIT_CONFIG_KEY_$n=url.file://$bare.insteadOf" "GIT_CONFIG_VALUE_$n=$LIB_REMOTE"
}

# outside_go DIR: the go settings of a user outside the repository: no
# workspace, a module cache of its own in DIR, the shardcast modules
# fetched directly (from serve_repo's copy) and never through a proxy or
# the checksum database. Third-party modules come from this machine's
# module cache where it has them (a file:// proxy: fast, and offline once
# make vet filled it), else from $GOPROXY.
outside_go() {
	local cache proxy
	cache=$(go env GOMODCACHE)/cache/download
	proxy=$(go env GOPROXY)
	export GOWORK=off GOFLAGS="-mod=mod -modcacherw" GOPRIVATE=github.com/shardcast
	export GOPATH=$1/gopath GOMODCACHE=$1/gopath/pkg/mod
	case $proxy in
	off | "") export GOPROXY="file://$cache" ;;
	*) export GOPROXY="file://$cache,$proxy" ;;
	esac
}
