# unpack.sh, sourced by the device scripts: prepare.sh compresses the binaries
# so that they fit the tree that travels to the device; this restores them
# beside itself (gunzip keeps their mode).
for z in "$(dirname "${BASH_SOURCE[0]}")"/*.gz; do
	[ -e "$z" ] && gunzip -f "$z"
done
