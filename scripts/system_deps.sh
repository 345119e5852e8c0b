#!/usr/bin/env bash
# Debian packages some tests need, installed when missing (idempotent; quick when all are there).
#   libosmesa6: software OpenGL for MuJoCo's headless rendering (MUJOCO_GL=osmesa, lab.envs.dmc)
#   chromium: the browser the JupyterLab end-to-end test drives with Playwright
#             (tests/test_browser.py; Playwright's own browser downloads are not used)
#   postgresql: the server tests/test_sweeps.py starts on 127.0.0.1 for a sweep shared by
#               workers (the tests start and stop their own server in a temporary folder)
#   dataset-fashion-mnist: the official Fashion-MNIST files under
#               /usr/share/datasets/fashion-mnist, read offline by lab.data.load("fashion_mnist")
#   dict-devil: Bierce's The Devil's Dictionary (public domain) for the dictd server, the text
#               corpus of lab.data.text.load_text (the interlocking notebook's language model)
#   espeak-ng, sox: speech made here (lab.data.speech): espeak-ng speaks fixed sentences, sox
#               resamples them (the Parallel WaveNet notebook's audio)
# Without root or apt-get it prints one warning and succeeds; the tests that need a missing
# package then skip and say what to install.
set -euo pipefail

PACKAGES=(libosmesa6 chromium postgresql dataset-fashion-mnist dict-devil espeak-ng sox)

missing=()
for package in "${PACKAGES[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "warning: missing system packages ${missing[*]} (need root and apt-get to install" \
         "them: apt-get install -y ${missing[*]}); the tests that need them will skip" >&2
    exit 0
fi

echo "installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
