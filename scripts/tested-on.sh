#!/usr/bin/env bash
# Keeps the "Tested on" table between <!-- tested-on:begin --> and
# <!-- tested-on:end --> in sync with what the server matrix ran
# (scripts/test-matrix.sh).
#
#   scripts/tested-on.sh write|check RESULTS FILE...
#
# RESULTS has one line per server run: name, version, PASS or FAIL, and
# what ran, tab-separated. write rewrites each FILE's table: a passing
# server's row is added or replaced, a failing one's removed, and the rows
# of servers this run did not cover are kept (dropped with EXACT=1, for a
# run of the whole matrix); rows are sorted by server and version. check changes nothing and fails, showing the difference,
# when write would change a table. A FILE without both markers fails
# either way.
set -euo pipefail
mode=${1:-}
results=${2:-}
shift 2 || true
if [ "$mode" != write ] && [ "$mode" != check ] || [ ! -f "$results" ] || [ $# -eq 0 ]; then
	echo "usage: $0 write|check RESULTS FILE..." >&2
	exit 2
fi
begin='<!-- tested-on:begin -->'
end='<!-- tested-on:end -->'

# render prints FILE with its table rebuilt from its old rows and RESULTS.
render() {
	awk -v begin="$begin" -v end="$end" -v results="$results" -v exact="${EXACT:-}" -F'\t' '
	function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
	BEGIN {
		while ((getline line < results) > 0) {
			split(line, f, "\t")
			key = f[1] " " f[2]
			if (f[3] == "PASS") { set[key] = "| " f[1] " | " f[2] " | " f[4] " |" }
			else { drop[key] = 1 }
		}
	}
	$0 == begin {
		if (inside || seen) { print "tested-on: second " begin > "/dev/stderr"; exit 3 }
		inside = 1; seen = 1; print; next
	}
	$0 == end {
		if (!inside) { print "tested-on: " end " before " begin > "/dev/stderr"; exit 3 }
		for (k in set) rows[k] = set[k]
		for (k in drop) delete rows[k]
		n = 0
		for (k in rows) keys[++n] = k
		# Insertion sort by server name, then by version number.
		for (i = 2; i <= n; i++) {
			v = keys[i]
			for (j = i - 1; j >= 1 && later(keys[j], v); j--) keys[j + 1] = keys[j]
			keys[j + 1] = v
		}
		print "| Server | Version | What ran (`make test-matrix`) |"
		print "|---|---|---|"
		for (i = 1; i <= n; i++) print rows[keys[i]]
		inside = 0; print; next
	}
	inside {
		# An old row: | name | version | what ran |
		if (exact == "" && $0 ~ /^\|/ && $0 !~ /^\|[- |]*$/) {
			split($0, c, "|")
			name = trim(c[2]); version = trim(c[3])
			if (name != "Server" && version ~ /^[0-9]/) rows[name " " version] = $0
		}
		next
	}
	{ print }
	END {
		if (inside || !seen) { print "tested-on: no " begin " ... " end " block" > "/dev/stderr"; exit 3 }
	}
	function later(a, b,   x, y, p, q, i, n, m) {
		split(a, x, " "); split(b, y, " ")
		if (x[1] != y[1]) return x[1] > y[1]
		n = split(x[2], p, "."); m = split(y[2], q, ".")
		for (i = 1; i <= 3; i++) if (p[i] + 0 != q[i] + 0) return p[i] + 0 > q[i] + 0
		return 0
	}
	' "$1"
}

status=0
for file in "$@"; do
	tmp=$(mktemp)
	if ! render "$file" >"$tmp"; then
		echo "tested-on: $file: cannot update its table" >&2
		rm -f "$tmp"
		status=1
		continue
	fi
	if cmp -s "$file" "$tmp"; then
		echo "tested-on: $file: table up to date"
		rm -f "$tmp"
	elif [ "$mode" = check ]; then
		echo "tested-on: $file: the table differs from what this run tested (run make test-matrix and commit it):" >&2
		diff -u "$file" "$tmp" >&2 || true
		rm -f "$tmp"
		status=1
	else
		cat "$tmp" >"$file"
		rm -f "$tmp"
		echo "tested-on: $file: table updated"
	fi
done
exit $status
