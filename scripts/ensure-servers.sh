#!/usr/bin/env bash
# Puts each server of the test matrix (docs/SERVERS.md) in a folder of a
# cache directory, from Debian's packages only, and prints the folders,
# one per line, in the matrix's order.
#
#   scripts/ensure-servers.sh [name ...]     e.g. valkey-9.1.2 redis-8.0.6
#
# Each folder holds redis-server, redis-cli and redis-benchmark: copies of
# the package's binaries (Valkey's under Redis's names) pointed with
# Debian's patchelf at the loader and libraries of their own Debian release
# in lib/, so a trixie or sid build runs on Debian 12 like a native one.
# A folder whose three binaries answer --version with the expected version
# is kept; only what is missing is downloaded, with apt-get under a private
# state directory (nothing is installed system-wide). A server Debian no
# longer serves fails, naming the package and the versions it offers.
#
# The cache is $SHARDCAST_SERVERS_CACHE, else $XDG_CACHE_HOME/shardcast/servers,
# else ~/.cache/shardcast/servers.
set -euo pipefail

# The matrix: folder, Debian suite, tools package (it holds the server,
# the cli and the benchmark), and the name the package gives its binaries.
servers=(
	"redis-7.0.15  bookworm           redis-tools  redis"
	"valkey-8.0.1  bookworm-backports valkey-tools valkey"
	"redis-8.0.2   trixie             redis-tools  redis"
	"valkey-8.1.1  trixie             valkey-tools valkey"
	"redis-8.0.6   sid                redis-tools  redis"
	"valkey-9.1.2  sid                valkey-tools valkey"
)
# Suites whose libc is new enough for each server's release.
declare -A libc_suite=([bookworm]=bookworm [bookworm-backports]=bookworm [trixie]=trixie [sid]=sid)

cache=${SHARDCAST_SERVERS_CACHE:-${XDG_CACHE_HOME:-${HOME:?set HOME or SHARDCAST_SERVERS_CACHE}/.cache}/shardcast/servers}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

say() { echo "ensure-servers: $*" >&2; }
die() {
	say "$*"
	exit 1
}

# ok tells whether folder $1 holds the three binaries of version $2.
ok() {
	local dir=$1 version=$2 b
	for b in redis-server redis-cli redis-benchmark; do
		[ -x "$dir/$b" ] || return 1
	done
	isolated "$dir/redis-server" || return 1
	"$dir/redis-server" --version 2>/dev/null | grep -q "v=$version " || return 1
	"$dir/redis-cli" --version 2>/dev/null | grep -q "$version" || return 1
	# redis-benchmark has no --version before 7.2; it must at least load.
	"$dir/redis-benchmark" --help >/dev/null 2>&1 || [ $? -eq 1 ] || return 1
}

apt_ready=
apt_opts=()
# apt_init makes a private apt state over Debian's archive for the suites
# the matrix uses and reads the package lists, once per run.
apt_init() {
	[ -n "$apt_ready" ] && return
	command -v apt-get >/dev/null || die "apt-get is needed to fetch the matrix's servers from Debian's packages"
	local st=$cache/.apt
	mkdir -p "$st/state/lists/partial" "$st/cache/archives/partial"
	local key=/usr/share/keyrings/debian-archive-keyring.gpg
	[ -f "$key" ] || die "$key is missing (Debian's package debian-archive-keyring)"
	: >"$st/sources.list"
	local suite
	for suite in bookworm bookworm-backports trixie sid; do
		echo "deb [signed-by=$key] http://deb.debian.org/debian $suite main" >>"$st/sources.list"
	done
	apt_opts=(-o "Dir::State=$st/state" -o "Dir::Cache=$st/cache"
		-o "Dir::Cache::pkgcache=$st/cache/pkgcache.bin" -o "Dir::Cache::srcpkgcache=$st/cache/srcpkgcache.bin"
		-o "Dir::Etc::SourceList=$st/sources.list" -o Dir::Etc::SourceParts=/dev/null
		-o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
		-o APT::Architecture=amd64 -o Debug::NoLocking=1
		-o APT::Sandbox::User="$(id -un)"
		-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false)
	say "reading Debian's package lists (bookworm, bookworm-backports, trixie, sid)"
	apt-get "${apt_opts[@]}" -qq update >&2 || die "apt-get update of Debian's archive failed"
	apt_ready=1
}

# fetch PKG SUITE [VERSION] downloads one package into the current
# directory: VERSION's upstream release when given, else the suite's.
fetch() {
	local pkg=$1 suite=$2 want=${3:-} ver
	ver=$(apt-cache "${apt_opts[@]}" madison "$pkg" | awk -F'|' -v s="debian $suite/" '
		index($3, s) { gsub(/ /, "", $2); print $2; exit }')
	if [ -z "$ver" ]; then
		die "Debian's $suite does not serve the package $pkg"
	fi
	if [ -n "$want" ] && ! [[ $ver =~ ^([0-9]+:)?${want//./\\.}[-+~] ]]; then
		die "Debian's $suite serves $pkg $ver, not $want: update the matrix in $0 (and docs/SERVERS.md)"
	fi
	apt-get "${apt_opts[@]}" -qq download "$pkg=$ver" >&2 2>/dev/null ||
		apt-get "${apt_opts[@]}" -qq download "$pkg=$ver" >&2 ||
		die "apt-get download $pkg=$ver ($suite) failed"
}

# deps prints the library packages a .deb depends on (the first choice
# of each alternative; adduser, systemd and the like are not libraries).
deps() {
	dpkg-deb -f "$1" Depends Pre-Depends | tr ',' '\n' | sed 's/|.*//; s/(.*//; s/:any//; s/ //g' |
		grep -E '^lib|^zlib' || true
}

patchelf_bin=
# ensure_patchelf finds Debian's patchelf, or unpacks bookworm's into the cache.
ensure_patchelf() {
	[ -n "$patchelf_bin" ] && return
	if command -v patchelf >/dev/null; then
		patchelf_bin=$(command -v patchelf)
		return
	fi
	local d=$cache/.patchelf
	if [ ! -x "$d/usr/bin/patchelf" ]; then
		apt_init
		local tmp
		tmp=$(mktemp -d)
		(cd "$tmp" && fetch patchelf bookworm) || exit 1
		dpkg-deb -x "$tmp"/patchelf_*.deb "$d" || die "cannot unpack bookworm's patchelf"
		rm -rf "$tmp"
	fi
	patchelf_bin=$d/usr/bin/patchelf
}

# isolated tells whether every library binary $1 loads comes from its
# folder's lib/, so that no library of the host stands in for one of its
# own release's.
isolated() {
	local bin=$1 lib
	lib=$(dirname "$bin")/lib
	[ -x "$lib/ld-linux-x86-64.so.2" ] || return 1
	"$lib/ld-linux-x86-64.so.2" --list "$bin" 2>&1 | awk -v lib="$lib/" '
		/linux-vdso/ { next }
		/=>/ { if (index($3, lib) != 1) bad = 1; next }
		{ if (index($1, lib) != 1) bad = 1 }
		END { exit bad }'
}

# build NAME SUITE PKG STEM puts server NAME in $cache/NAME. It runs in a
# subshell of its own: a failure ends it with die, and its work folder
# goes with it.
build() {
	local name=$1 suite=$2 pkg=$3 stem=$4
	local version=${name#*-} libsuite=${libc_suite[$suite]}
	local work
	work=$(mktemp -d "$cache/.build-$name.XXXX") || die "$name: cannot make a work folder in $cache"
	trap "rm -rf '$work'" EXIT
	say "$name: downloading $pkg $version from Debian $suite, with $libsuite's libraries"
	mkdir "$work/debs" "$work/root" || die "$name: cannot write in $work"
	cd "$work/debs" || die "$name: cannot enter $work/debs"
	fetch "$pkg" "$suite" "$version"
	# The libraries it needs, and theirs, from the release it was built for.
	local seen=" " queue more p
	read -r -a queue <<<"libc6 libgcc-s1 $(deps ./*.deb | tr '\n' ' ')"
	while [ ${#queue[@]} -gt 0 ]; do
		p=${queue[0]}
		queue=("${queue[@]:1}")
		case "$seen" in *" $p "*) continue ;; esac
		seen="$seen$p "
		fetch "$p" "$libsuite"
		read -r -a more <<<"$(deps ./"${p}"_*.deb | tr '\n' ' ')"
		queue+=("${more[@]}")
	done
	for p in ./*.deb; do
		dpkg-deb -x "$p" "$work/root" || die "$name: cannot unpack $p"
	done
	# Built in the final folder, since the loader's path and the library
	# path are written into the binaries; a folder that fails is removed.
	local dir=$cache/$name
	rm -rf "$dir"
	trap "rm -rf '$work'; [ -n \"\${built:-}\" ] || rm -rf '$dir'" EXIT
	mkdir -p "$dir/lib" || die "$name: cannot write $dir"
	# Every shared object of the unpacked packages, flat in lib/.
	find "$work/root" \( -name '*.so' -o -name '*.so.*' \) \( -type f -o -type l \) -print0 |
		while IFS= read -r -d "" f; do [ -e "$dir/lib/${f##*/}" ] || cp -L "$f" "$dir/lib/" 2>/dev/null || true; done
	local loader=$dir/lib/ld-linux-x86-64.so.2 b src
	[ -e "$loader" ] || die "$name: libc6 of $libsuite brought no ld-linux-x86-64.so.2"
	for b in server cli benchmark; do
		src=$work/root/usr/bin/$stem-$b
		[ "$b" = server ] && src=$work/root/usr/bin/$stem-check-rdb
		[ -f "$src" ] || die "$name: $pkg has no $(basename "$src")"
		cp "$src" "$dir/redis-$b" || die "$name: cannot copy $src"
		# DT_RPATH (--force-rpath), not DT_RUNPATH: it also serves the
		# libraries' own dependencies (libstdc++ of libjemalloc, say).
		"$patchelf_bin" --set-interpreter "$loader" --force-rpath --set-rpath "$dir/lib" "$dir/redis-$b" ||
			die "$name: patchelf failed on redis-$b"
		if ! isolated "$dir/redis-$b"; then
			"$loader" --list "$dir/redis-$b" >&2 || true
			die "$name: redis-$b loads a library its packages did not bring (above)"
		fi
	done
	ok "$dir" "$version" || {
		"$dir/redis-server" --version >&2 || true
		die "$name: the unpacked binaries do not answer --version with $version"
	}
	built=1
}

[ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] ||
	die "the matrix's servers are fetched for amd64 only; this machine is $(dpkg --print-architecture 2>/dev/null || uname -m)"
# One run at a time per cache: runs share the apt state and the folders.
exec 9>"$cache/.lock"
flock 9 || die "cannot lock $cache/.lock"
rm -rf "$cache"/.build-*

want=("$@")
picked=()
for row in "${servers[@]}"; do
	read -r name _ <<<"$row"
	if [ ${#want[@]} -eq 0 ] || printf '%s\n' "${want[@]}" | grep -qxF "$name"; then
		picked+=("$row")
	fi
done
for w in "${want[@]}"; do
	printf '%s\n' "${picked[@]}" | awk '{print $1}' | grep -qxF "$w" ||
		die "unknown server $w (known: $(printf '%s\n' "${servers[@]}" | awk '{printf "%s ", $1}'))"
done
failed=()
for row in "${picked[@]}"; do
	read -r name suite pkg stem <<<"$row"
	if ! ok "$cache/$name" "${name#*-}"; then
		apt_init
		ensure_patchelf
		# Each in a subshell: one Debian refuses does not stop the others.
		if ! (build "$name" "$suite" "$pkg" "$stem"); then
			failed+=("$name")
			continue
		fi
	fi
	say "$name: $("$cache/$name/redis-server" --version)"
	echo "$cache/$name"
done
if [ ${#failed[@]} -gt 0 ]; then
	die "could not provide ${failed[*]} (above)"
fi
