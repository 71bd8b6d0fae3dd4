#!/usr/bin/env bash
# fetch-pnetcdf-source.sh DIR
#
# Unpacks the source of the installed libpnetcdf-dev (Debian's source package `pnetcdf`,
# the same version) into DIR/pnetcdf-VERSION, for tests/pnetcdf.rs, which builds and
# runs PnetCDF's own test/testcases and examples/C. Only Debian's package archive is
# used, through apt-get and the machine's own apt sources (their `deb` entries read as
# `deb-src`), with a package list of its own under DIR: the system's apt state is left
# as it was. Nothing fetched is committed: DIR is the build's scratch space.
set -euo pipefail
dir=$1
version=$(dpkg-query -W -f='${Version}' libpnetcdf-dev)
upstream=${version%-*}
tree="$dir/pnetcdf-$upstream"
if [ -d "$tree/test/testcases" ] && [ -d "$tree/examples/C" ]; then
    echo "$tree"
    exit 0
fi
apt_dir="$dir/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/parts" "$dir/download"
: > "$apt_dir/sources.list"
for f in /etc/apt/sources.list.d/*.sources; do
    [ -e "$f" ] && sed 's/^Types:.*/Types: deb-src/' "$f" > "$apt_dir/parts/$(basename "$f")"
done
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -e "$f" ] && sed -n 's/^deb \(.*\)/deb-src \1/p' "$f" >> "$apt_dir/sources.list"
done
apt=(apt-get -q -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/parts"
     -o "Dir::State::Lists=$apt_dir/lists" -o "APT::Sandbox::User=root")
"${apt[@]}" update >&2
(cd "$dir/download" && "${apt[@]}" source --download-only "pnetcdf=$version" >&2)
tar -xJf "$dir/download/pnetcdf_$upstream.orig.tar.xz" -C "$dir"
[ -d "$tree/test/testcases" ] || { echo "fetch-pnetcdf-source: no $tree/test/testcases in the source package" >&2; exit 1; }
echo "$tree"
