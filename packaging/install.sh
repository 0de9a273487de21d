#!/bin/sh
# make install: the daemon, CLI, library, header, pkg-config file, units,
# man pages and completions from BUILDDIR into DESTDIR; make install-java:
# the classes-only jar and the JNI library.
#
#   packaging/install.sh BUILDDIR VERSION MSGPACK_PC [java]
#
# The directories are make's variables or the environment's: PREFIX
# (/usr/local), DESTDIR, BINDIR, SBINDIR, LIBDIR, INCLUDEDIR, PKGCONFIGDIR,
# MANDIR, SYSTEMDUNITDIR, BASHCOMPDIR, ZSHCOMPDIR, and for java JAVADIR
# and JNIDIR (LIBDIR/jni: /usr/lib/TRIPLET/jni with PREFIX=/usr
# LIBDIR=/usr/lib/TRIPLET, where the jar's loader looks, as the Debian
# packages libgpuipc-java and libgpuipc-jni have them).
set -eu
B=$1 VERSION=$2 MSGPACK_PC=$3
: "${PREFIX:=/usr/local}" "${DESTDIR:=}"
: "${BINDIR:=$PREFIX/bin}" "${SBINDIR:=$PREFIX/sbin}" "${LIBDIR:=$PREFIX/lib}"
: "${INCLUDEDIR:=$PREFIX/include}" "${PKGCONFIGDIR:=$LIBDIR/pkgconfig}" "${MANDIR:=$PREFIX/share/man}"
: "${SYSTEMDUNITDIR:=$PREFIX/lib/systemd/system}"
: "${BASHCOMPDIR:=$PREFIX/share/bash-completion/completions}"
# zsh's own default is site-functions; Debian's zsh reads vendor-completions.
[ "$PREFIX" = /usr ] && zsh=vendor-completions || zsh=site-functions
: "${ZSHCOMPDIR:=$PREFIX/share/zsh/$zsh}"
: "${JAVADIR:=$PREFIX/share/java}" "${JNIDIR:=$LIBDIR/jni}"
D=$DESTDIR

if [ "${4:-}" = java ]; then
        set -x
        install -v -D -m 0644 "$B/java/gpuipc-noarch.jar" "$D$JAVADIR/gpuipc-$VERSION.jar"
        ln -sf "gpuipc-$VERSION.jar" "$D$JAVADIR/gpuipc.jar"
        install -v -D -m 0644 "$B/java/libgpuipc_jni.so" "$D$JNIDIR/libgpuipc_jni.so"
        exit 0
fi
lib=$(readlink "$B/libgpuipc.so.1")     # libgpuipc.so.1.ABIMINOR.0
set -x
install -v -D -m 0755 "$B/gpuipcd" "$D$SBINDIR/gpuipcd"
install -v -D -m 0755 "$B/gpuipcctl" "$D$BINDIR/gpuipcctl"
install -v -D -m 0755 "$B/$lib" "$D$LIBDIR/$lib"
ln -sf "$lib" "$D$LIBDIR/libgpuipc.so.1"
ln -sf libgpuipc.so.1 "$D$LIBDIR/libgpuipc.so"
install -v -m 0644 "$B/libgpuipc.a" "$D$LIBDIR/"
install -v -D -m 0644 client/gpuipc.h "$D$INCLUDEDIR/gpuipc.h"
install -v -d "$D$PKGCONFIGDIR"
sed -e "s|@PREFIX@|$PREFIX|" -e "s|@LIBDIR@|$LIBDIR|" -e "s|@INCLUDEDIR@|$INCLUDEDIR|" \
    -e "s|@VERSION@|$VERSION|" -e "s|@MSGPACK_PC@|$MSGPACK_PC|" packaging/gpuipc.pc.in \
    > "$D$PKGCONFIGDIR/gpuipc.pc"
install -v -D -m 0644 systemd/gpuipcd.socket "$D$SYSTEMDUNITDIR/gpuipcd.socket"
sed "s|^ExecStart=/usr/sbin/gpuipcd|ExecStart=$SBINDIR/gpuipcd|" systemd/gpuipcd.service \
    > "$D$SYSTEMDUNITDIR/gpuipcd.service"
install -v -D -m 0644 systemd/gpuipcd.sysusers "$D$PREFIX/lib/sysusers.d/gpuipcd.conf"
install -v -D -m 0644 systemd/gpuipcd.tmpfiles "$D$PREFIX/lib/tmpfiles.d/gpuipcd.conf"
for s in 1 3 5 8; do
        install -v -D -m 0644 -t "$D$MANDIR/man$s" docs/man/*."$s"
done
install -v -d "$D$BASHCOMPDIR" "$D$ZSHCOMPDIR"
"$B/gpuipcctl" completion bash > "$D$BASHCOMPDIR/gpuipcctl"
"$B/gpuipcctl" completion zsh > "$D$ZSHCOMPDIR/_gpuipcctl"
