#!/usr/bin/env bash
# The lab's 6.12-percmd kernel: Debian's linux-source-6.12 with the 6.10/6.11 session
# behaviour put back — a fresh salted session for every HMAC-protected command, ended with it.
#
#   scripts/lab-percmd-edit.sh < drivers/char/tpm/tpm2-sessions.c > edited.c
#
# A filter (stdin to stdout), written for this repository; it copies no kernel source. It
# removes one statement from tpm_buf_append_hmac_session(), the one Jarkko Sakkinen's
# "tpm: Lazily flush the auth session" (mainline commit df745e25098d, 6.12-rc5; in 6.11.7
# and later stable kernels) added:
#
#     attributes |= TPM2_SA_CONTINUE_SESSION;
#
# and its comment ("The first write to /dev/tpm{rm0} will flush the session."), putting a
# comment of ours in their place. Without it, continueSession is what each caller asks for, as
# in 6.10/6.11: tpm2_pcr_extend() asks for none (attributes 0), so the TPM ends the session
# when the PCR_Extend completes, tpm_buf_check_hmac_response() frees chip->auth (the code
# path df745e25098d kept), and the next extend's tpm2_start_auth_session() finds no session
# and sets one up again: ContextLoad (null primary) → StartAuthSession (salted) →
# FlushContext (null primary) → PCR_Extend. tpm2_get_random() asks for continueSession itself
# and ends its session with tpm2_end_auth_session() (FlushContext), as it did in 6.10/6.11.
# The rest of df745e25098d (chip->auth allocated per session, ended on a /dev/tpm* write,
# suspend and unregister) stays: with no session kept between commands those paths find none.
#
# Exit status 1 with one line on stderr when the statement is not found exactly once inside
# tpm_buf_append_hmac_session() (another source version): nothing is written then.
set -euo pipefail
out=$(awk '
    /^void tpm_buf_append_hmac_session\(/ { infn = 1 }
    infn && /^}/ { infn = 0 }
    infn && /^\t\/\* The first write to \/dev\/tpm\{rm0\} will flush the session\. \*\/$/ { comment = NR; next }
    infn && /^\tattributes \|= TPM2_SA_CONTINUE_SESSION;$/ {
        found++
        print "\t/*"
        print "\t * tpmtop lab, 6.12-percmd (scripts/lab-percmd-edit.sh): continueSession"
        print "\t * is left as the caller set it, as in 6.10/6.11, so a PCR_Extend ends its"
        print "\t * session and the next command starts a new one."
        print "\t */"
        next
    }
    { print }
    END {
        if (found != 1) { printf "lab-percmd-edit: expected one \"attributes |= TPM2_SA_CONTINUE_SESSION;\" in tpm_buf_append_hmac_session(), found %d\n", found > "/dev/stderr"; exit 1 }
        if (!comment) { print "lab-percmd-edit: the comment before it (\"The first write to /dev/tpm{rm0} ...\") is missing" > "/dev/stderr"; exit 1 }
    }
') || exit 1
printf '%s\n' "$out"
