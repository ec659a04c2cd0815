#!/bin/busybox sh
# /init of the kernel-vm initramfs (scripts/kernel-vm.sh): load the modules, mount the host's
# root read-only and the results folder read-write over 9p, chroot into the host root, run
# the command as root, write its exit status next to its output, power off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
# the guest's clock at /init (tpmtop lab reads it; the host stamps the line's arrival)
echo "kernel-vm(init): started at $(cut -d' ' -f1 /proc/uptime)" > /dev/console

say() { echo "kernel-vm(init): $*" > /dev/console; }
die() { say "$*"; sync; poweroff -f; }

while read -r m; do
    insmod "/modules/$m" || say "insmod $m failed"
done < /modules/order

O9P=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o "$O9P" results /results || die "cannot mount the results share"
[ -f /results/vm.env ] || die "no vm.env in the results share"
. /results/vm.env   # RESULTS (the same folder's path on the host), WORKDIR, RUN_AS_ENV
uname -r > /results/release

mount -t 9p -o "$O9P,ro,cache=loose" hostroot /newroot || die "cannot mount the host root"
R=/newroot
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts devpts $R/dev/pts
mount -t tmpfs tmpfs $R/dev/shm
mount -t tracefs tracefs $R/sys/kernel/tracing || say "cannot mount tracefs"
mount -t securityfs securityfs $R/sys/kernel/security || say "cannot mount securityfs"
mount -t tmpfs -o size=512m tmpfs $R/tmp
mount -t tmpfs tmpfs $R/run
mount -o bind /results "$R$RESULTS" || die "cannot bind the results share at $RESULTS"

say "running $RESULTS/cmd.sh in $WORKDIR on $(uname -r)"
# The command's output goes to the results share and to the console log; its status to a file.
( chroot $R /usr/bin/env -i $RUN_AS_ENV /bin/sh -c 'cd "$0" && exec /bin/sh "$1/cmd.sh"' "$WORKDIR" "$RESULTS" \
    < /dev/null 2>&1; echo $? > /results/status.tmp ) | tee /results/output.log > /dev/console
dmesg > /results/dmesg.txt
mv /results/status.tmp /results/status
say "command exited $(cat /results/status)"
sync
umount "$R$RESULTS" 2>/dev/null
umount /results 2>/dev/null
# Without ACPI (acpi=off) the kernel cannot power off and would halt, leaving qemu to its
# time-out: a reboot ends qemu instead (-no-reboot).
[ -d /sys/firmware/acpi ] || reboot -f
poweroff -f
