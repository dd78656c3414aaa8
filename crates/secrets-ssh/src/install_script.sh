#!/bin/sh
# cairn's built-in install script for dynamic SSH keys: what a dynamic role runs when its
# install_script is unset (the same contract as Vault's default script).
#
# The engine runs it on the host as the role's admin_user, from the admin's home directory:
#   $1  "install" or "uninstall"
#   $2  a file holding the public key line, prefixed with the role's key_option_specs
#   $3  the user's authorized_keys file, /home/<username>/.ssh/authorized_keys
#
# Both actions first drop every line equal to the key; install then appends it. Installing
# creates the .ssh directory (0700) and the file (0600), owned by the user, when missing.
# Needs sh, id, grep, cat, tee, mkdir, touch, chmod, chown and, for an admin other than
# root, sudo without a password. Use a custom install_script for other platforms.
set -e

option=$1
key_file=$2
auth_keys=$3

case "$option" in
    install | uninstall) ;;
    *)
        echo "usage: $0 install|uninstall PUBLIC_KEY_FILE AUTHORIZED_KEYS_FILE" >&2
        exit 1
        ;;
esac

if [ "$(id -u)" -eq 0 ]; then as_root=; else as_root=sudo; fi

kept="$key_file.kept"
trap 'rm -f "$kept"' EXIT

dir=${auth_keys%/*}
if [ "$option" = install ] && ! $as_root test -e "$auth_keys"; then
    user=${dir%/.ssh}
    user=${user##*/}
    $as_root mkdir -p "$dir"
    $as_root touch "$auth_keys"
    $as_root chmod 700 "$dir"
    $as_root chmod 600 "$auth_keys"
    $as_root chown "$user" "$dir" "$auth_keys" || true
fi

if $as_root test -e "$auth_keys"; then
    # Every line but the key's; grep exits 1 when no line is left, which is not an error.
    $as_root cat "$auth_keys" | grep -vxF -f "$key_file" >"$kept" || true
    if [ "$option" = install ]; then
        cat "$key_file" >>"$kept"
    fi
    $as_root tee "$auth_keys" <"$kept" >/dev/null
fi
