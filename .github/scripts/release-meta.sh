#!/usr/bin/env bash
# What a release publishes, read from the repository itself, and the refusal of a tag that disagrees with it.
#
#   release-meta.sh TAG OWNER      e.g. release-meta.sh v0.1.0 pi-dispatch
#
# Prints KEY=VALUE lines for $GITHUB_OUTPUT (.github/workflows/release.yml):
#   version          the tag without its "v": Chart.yaml's version and appVersion must both equal it
#   registry         ghcr.io/<owner, lower case>
#   operator_image   the chart's image.repository (values.yaml), which must be <registry>/operator
#   job_image        the chart's default job image (templates/_helpers.tpl), which must be <registry>/job
#   chart_repo       oci://<registry>/charts (the chart lands at <registry>/charts/pi-dispatch:<version>)
#   pi_version       the pi that e2e/pi/package.json pins (the job image's PI_VERSION build argument)
# Exits 1 with one line per disagreement, each naming the file to change: the images and the chart a
# release pushes are exactly the ones `helm install` of that chart pulls, and a release (not a pre-release)
# has its dated section in CHANGELOG.md ("## <version> — <YYYY-MM-DD>", no longer "(unreleased)").
set -euo pipefail
tag="${1:?usage: release-meta.sh TAG OWNER}"
owner="${2:?usage: release-meta.sh TAG OWNER}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
chart="$root/charts/pi-dispatch"
problems=()

version="${tag#v}"
if ! [[ "$tag" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
    problems+=("tag $tag is not v<major>.<minor>.<patch>[-<pre-release>]: push a tag like v0.1.0")
fi
# Top-level keys only (no indentation); quotes around the value are dropped.
chart_field() { sed -n "s/^$1:[[:space:]]*[\"']\{0,1\}\([^\"'[:space:]]*\)[\"']\{0,1\}[[:space:]]*\$/\1/p" "$chart/Chart.yaml"; }
chart_version="$(chart_field version)"
app_version="$(chart_field appVersion)"
[ "$chart_version" = "$version" ] || problems+=("tag $tag but charts/pi-dispatch/Chart.yaml version is "\
"'$chart_version': set version: $version there (or tag v$chart_version)")
[ "$app_version" = "$version" ] || problems+=("tag $tag but charts/pi-dispatch/Chart.yaml appVersion is "\
"'$app_version': set appVersion: \"$version\" there (the images are tagged with it)")

registry="ghcr.io/$(printf '%s' "$owner" | tr '[:upper:]' '[:lower:]')"
# image.repository: the first `repository:` under the top-level `image:` block of values.yaml.
operator_image="$(awk '/^image:/ {in_image = 1; next} /^[^[:space:]#]/ {in_image = 0}
    in_image && $1 == "repository:" {print $2; exit}' "$chart/values.yaml" | tr -d "\"'")"
job_image="$(sed -n 's|.*printf "\([^"%]*\):%s" .Chart.AppVersion.*|\1|p' "$chart/templates/_helpers.tpl" | head -1)"
[ "$operator_image" = "$registry/operator" ] || problems+=("charts/pi-dispatch/values.yaml image.repository is "\
"'$operator_image' but this release pushes $registry/operator: make them the same")
[ "$job_image" = "$registry/job" ] || problems+=("charts/pi-dispatch/templates/_helpers.tpl's default job image is "\
"'$job_image' but this release pushes $registry/job: make them the same")

# A release's notes: its CHANGELOG.md section, dated. A pre-release (v1.2.0-rc.1) is not held to it.
if [[ "$version" != *-* ]] && ! grep -Eq "^## ${version//./\\.} — [0-9]{4}-[0-9]{2}-[0-9]{2}\$" "$root/CHANGELOG.md"; then
    problems+=("CHANGELOG.md has no section '## $version — <YYYY-MM-DD>': date this release's section there "\
"(it says '$(grep -m1 -E "^## ${version//./\\.}([^0-9.]|\$)" "$root/CHANGELOG.md" || echo "nothing for $version")')")
fi

pi_version="$(sed -n 's|.*"@mariozechner/pi-coding-agent":[[:space:]]*"\([^"]*\)".*|\1|p' "$root/e2e/pi/package.json")"
[ -n "$pi_version" ] || problems+=("e2e/pi/package.json pins no @mariozechner/pi-coding-agent version")

if [ "${#problems[@]}" -gt 0 ]; then
    printf 'release refused: %s\n' "${problems[@]}" >&2
    exit 1
fi
printf '%s\n' "version=$version" "registry=$registry" "operator_image=$operator_image" "job_image=$job_image" \
    "chart_repo=oci://$registry/charts" "pi_version=$pi_version"
