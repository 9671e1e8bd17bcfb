#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writes the long public-domain texts used for perplexity as plain UTF-8 files in a cache folder
# (default ~/.cache/tandem/texts, or $TANDEM_TEXT_DIR, or the first argument):
#   kjv.txt          the King James Bible, Genesis 1:1 to Revelation 22:21, as Debian's `bible`
#                    (package bible-kjv) prints it: book and chapter headings, numbered verses
#   austen.txt       Jane Austen's six novels from Debian's r-cran-janeaustenr, in the order of
#                    janeaustenr::austen_books(), the lines of each joined by "\n", a blank line
#                    between novels
#   prideprejudice.txt  Pride and Prejudice alone (janeaustenr::prideprejudice)
# Needs: apt-get install bible-kjv r-cran-janeaustenr (scripts/setup.sh installs both; the latter
# brings R). Prints the folder on its last line.
set -euo pipefail

dir=${1:-${TANDEM_TEXT_DIR:-$HOME/.cache/tandem/texts}}
mkdir -p "$dir"

if ! command -v bible >/dev/null; then
  echo "get_texts.sh: 'bible' not found: apt-get install bible-kjv" >&2
  exit 2
fi
bible "gen1:1-rev22:21" >"$dir/kjv.txt.tmp"
mv "$dir/kjv.txt.tmp" "$dir/kjv.txt"

if ! command -v Rscript >/dev/null || ! Rscript -e 'library(janeaustenr)' >/dev/null 2>&1; then
  echo "get_texts.sh: R package janeaustenr not found: apt-get install r-cran-janeaustenr" >&2
  exit 2
fi
Rscript --vanilla - "$dir" <<'RSCRIPT'
suppressMessages(library(janeaustenr))
dir <- commandArgs(trailingOnly = TRUE)[1]
books <- austen_books()
parts <- lapply(levels(books$book), function(b) paste(books$text[books$book == b], collapse = "\n"))
con <- file(file.path(dir, "austen.txt.tmp"), open = "w", encoding = "UTF-8")
writeLines(paste(unlist(parts), collapse = "\n\n"), con)
close(con)
con <- file(file.path(dir, "prideprejudice.txt.tmp"), open = "w", encoding = "UTF-8")
writeLines(prideprejudice, con)
close(con)
RSCRIPT
mv "$dir/austen.txt.tmp" "$dir/austen.txt"
mv "$dir/prideprejudice.txt.tmp" "$dir/prideprejudice.txt"
for f in kjv austen prideprejudice; do
  printf '%s: %s bytes, sha256 %s\n' "$f.txt" "$(wc -c <"$dir/$f.txt")" \
    "$(sha256sum "$dir/$f.txt" | cut -d' ' -f1)" >&2
done
echo "$dir"
