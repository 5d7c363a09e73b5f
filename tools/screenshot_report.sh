#!/usr/bin/env bash
# Screenshot an `opfuse bench ops` report with headless Chromium, to look at how it renders
# (charts, colours, layout) without a desktop — e.g. on the GPU machine after a run.
#
#   tools/screenshot_report.sh DIR [OUT.png] [WIDTH,HEIGHT]
#
# DIR holds report.html (written by `opfuse bench ops --out DIR` or `opfuse bench report --dir DIR`).
# OUT defaults to DIR/report.png, the window to 1400,2400 (a taller window shows more of the page).
# With the full grid the charts take the first ~4000 px and the table goes on for ~20000 more.
# The report is self-contained, so nothing is fetched; Chromium runs with --no-sandbox because it
# usually runs as root in containers. Needs `chromium` (Debian: apt-get install -y chromium),
# `chromium-browser` or `google-chrome` on PATH.
set -euo pipefail
if [[ $# -lt 1 || $# -gt 3 ]]; then
  echo "usage: $0 DIR [OUT.png] [WIDTH,HEIGHT]" >&2
  exit 2
fi
dir=$1
html="$dir/report.html"
if [[ ! -f "$html" ]]; then
  echo "$0: $html: no such file (run opfuse bench ops --out $dir, or opfuse bench report --dir $dir)" >&2
  exit 2
fi
out=${2:-$dir/report.png}
size=${3:-1400,2400}
browser=""
for b in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$b" >/dev/null 2>&1; then browser=$b; break; fi
done
if [[ -z "$browser" ]]; then
  echo "$0: no chromium / google-chrome on PATH (Debian: apt-get install -y chromium)" >&2
  exit 1
fi
abs_html=$(cd "$(dirname "$html")" && pwd)/$(basename "$html")
abs_out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
  --screenshot="$abs_out" --window-size="$size" "file://$abs_html" >/dev/null 2>&1 || {
  echo "$0: $browser failed to render $abs_html" >&2
  exit 1
}
[[ -s "$abs_out" ]] || { echo "$0: no screenshot written" >&2; exit 1; }
echo "$abs_out"
