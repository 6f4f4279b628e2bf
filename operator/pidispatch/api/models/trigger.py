"""A Trigger's spec and status: when it fires (``on``), what its jobs run (``run``), what the operator reports."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator

from pidispatch.api import serves
from pidispatch.api.models.base import (
    DATE_TIME,
    INT64,
    NULLABLE,
    ApiModel,
    AuthorAssociation,
    AuthSource,
    Conditions,
    TriggerEvent,
)
from pidispatch.api.vocabulary import (
    AUTHOR_ASSOCIATIONS,
    DEFAULT_AUTHOR_ASSOCIATIONS,
    TRIGGER_RULES,
)
from pidispatch.contract import (
    ENV_AGENT_DIR,
    FORGE_TOKEN_NAMES,
    credential_name_problem,
)
from pidispatch.contract.overrides import affinity_problem, env_name_problem, mount_path, mount_path_problem

# ---- Trigger ----------------------------------------------------------------------------------------

class TriggerOn(ApiModel):
    event: TriggerEvent
    # Which event reads which field is checked at load (api/trigger.py), not by a CEL rule: a new rule would leave
    # Triggers stored before it unwritable (docs/crd-policy.md).
    label: Annotated[str | None, Field(max_length=253, description=(
        "issues.labeled: the label whose addition to an issue starts a job (compared ignoring case). Required "
        "there; on any other event the Trigger is refused (Ready False)."))] = None
    phrase: Annotated[str | None, Field(max_length=200, description=(
        "Comments and reviews: the mention (e.g. @pi) in the visible prose of a comment or review that starts a "
        "job. Required for issue_comment.created and pull_request_review_comment.created; optional for "
        "pull_request_review.submitted (unset: every review); on any other event the Trigger is refused (Ready "
        "False)."))] = None
    repository: Annotated[str, Field(max_length=200, pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")] | None = None
    schedule: Annotated[str, Field(max_length=100)] | None = None
    # Checked at load (api/trigger.py: InvalidTimeZone), not by the CRD: its schema cannot read the zone database.
    timeZone: Annotated[str | None, Field(max_length=100, description=(
        "cron: the time zone on.schedule is read in, an IANA name (Europe/Berlin, America/New_York), as a "
        "CronJob's spec.timeZone. Unset: UTC. A name the zone database does not know refuses the Trigger (Ready "
        "False, InvalidTimeZone); on any other event too (it would be ignored)."))] = None
    startingDeadlineSeconds: Annotated[int | None, Field(ge=0, json_schema_extra=INT64, description=(
        "cron: how late a slot may still start, in seconds, as a CronJob's spec.startingDeadlineSeconds. A slot "
        "the operator comes to this long or longer after it (it was down, or not leading) is skipped, not run, "
        "and counted in status.schedule.missed. Unset: the latest slot due runs however late."))] = None
    authorAssociations: Annotated[list[AuthorAssociation] | None, Field(
        max_length=len(AUTHOR_ASSOCIATIONS),
        description="Who may start a job with a comment or a review, by their GitHub author association. "
                    "Unset: " + ", ".join(DEFAULT_AUTHOR_ASSOCIATIONS) + ". On issues.labeled or cron the Trigger "
                    "is refused (Ready False).")] = None
    repositories: Annotated[list[Annotated[str, Field(max_length=200, pattern=serves.PATTERN)]] | None, Field(
        min_length=1, max_length=serves.PATTERNS_MAX,
        description="The repositories this Trigger serves, as OWNER/NAME where each half is a shell-style glob "
                    "(*, ?, [abc]) matched without regard to case: [\"acme/*\", \"acme-labs/api-*\"]. Deliveries "
                    "from any other repository create nothing, and resume is armed only on a Trigger that names "
                    "its repositories (here or in on.repository). Unset, with on.repository unset too: every "
                    "repository, and run.resume stays off.")] = None

    def served(self) -> tuple[str, ...]:
        """What this Trigger names as the repositories it serves (``api/serves.py``); empty: every repository."""
        return serves.entries(self.repository, self.repositories)


Quantities = Annotated[dict[str, Annotated[str, Field(max_length=64)]] | None, Field(max_length=16)]


class Resources(ApiModel):
    """The job container's ``resources``, as Kubernetes takes them (quantities as strings: ``500m``, ``2Gi``)."""

    requests: Quantities = None
    limits: Quantities = None


DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class SecretKey(ApiModel):
    """One key of a Secret in the Trigger's namespace: the job container reads it by ``secretKeyRef``."""

    secretName: Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN)]
    key: Annotated[str, Field(max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]


_CREDENTIAL_NAMES_RULE = (
    "self.all(k, k.matches('^[A-Za-z_][A-Za-z0-9_]*$') && !(k in " + str(list(FORGE_TOKEN_NAMES)).replace('"', "'")
    + ") && !k.startsWith('PI_SESSION') && k != '" + ENV_AGENT_DIR + "')")
Credentials = Annotated[dict[str, SecretKey] | None, Field(
    max_length=32, json_schema_extra={"x-kubernetes-validations": [{
        "rule": _CREDENTIAL_NAMES_RULE,
        "message": "credentials are named by environment variable, and may not be the forge token "
                   "(GH_TOKEN, GITHUB_TOKEN, ...: it comes from the github.* values) or the operator's "
                   "PI_SESSION* and PI_CODING_AGENT_DIR"}]},
    description="The model's credentials: environment variable name -> a Secret's key (e.g. OPENAI_API_KEY: "
                "{secretName: model-keys, key: openai}), merged over the deployment's job.credentials. Never "
                "a plain value.")]


# A label key: an optional DNS-subdomain prefix and a slash, then the name.
LABEL_KEY = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
             r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
# Keys are checked by TriggerRun's validator, not in the schema: a CRD's structural schema takes no
# propertyNames or patternProperties (the apiserver refuses the CRD), so the apiserver checks values only.
NodeSelector = Annotated[dict[str, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]] | None, Field(
    max_length=16, description="Node labels the job Pods must run on (a node pool), laid over the deployment's "
                               "job.nodeSelector: this Trigger's value wins for a key both name.")]


class Toleration(ApiModel):
    """A Kubernetes toleration, as the Pod spec takes it."""

    key: Annotated[str, Field(max_length=316)] | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: Annotated[str, Field(max_length=63)] | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: Annotated[int | None, Field(json_schema_extra=INT64)] = None


# ---- a Trigger's Pod overrides (issue 42 item 7; contract/overrides.py holds the rules) --------------------

PRESERVE: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}


class EnvVar(ApiModel):
    """One plain environment variable of the job container: a literal ``value``, never ``valueFrom`` (a Secret's
    value reaches a job by ``run.credentials`` or ``run.secrets``, never here)."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    value: Annotated[str, Field(max_length=4096)] = ""


class ConfigMapVolume(ApiModel):
    """A ConfigMap of the Trigger's namespace mounted read-only into the job container, under ``/mnt``."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(max_length=40, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description=(
        "The volume's name (a DNS label, 40 characters at most); the Pod calls it trigger-<name>."))]
    configMap: Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN, description=(
        "The ConfigMap, in the Trigger's namespace. The job Pod policy admits only those listed in "
        "jobPodPolicy.configMaps."))]
    mountPath: Annotated[str | None, Field(max_length=200, description=(
        "Where it is mounted, read-only: a directory under /mnt (away from the workspace, the session and "
        "everything the operator mounts). Unset: /mnt/<name>."))] = None


class Affinity(ApiModel):
    """A Kubernetes Pod affinity, as the Pod spec takes it; merged with the deployment's ``job.affinity`` so that
    it only narrows where the Pod may run (``manifests/scheduling.py``)."""

    model_config = ConfigDict(extra="forbid")

    nodeAffinity: Annotated[dict[str, Any] | None, Field(json_schema_extra=PRESERVE)] = None
    podAffinity: Annotated[dict[str, Any] | None, Field(json_schema_extra=PRESERVE)] = None
    podAntiAffinity: Annotated[dict[str, Any] | None, Field(json_schema_extra=PRESERVE)] = None


# A host the gateway's proxy may reach: a name, or *.domain for its subdomains, and an optional port.
EgressHost = Annotated[str, Field(max_length=253,
                                  pattern=r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$")]


class TriggerRun(ApiModel):
    kind: Annotated[Literal["forge", "local"] | None, Field(description=(
        "forge, what every job is: it checks out the event's repository. local (a job without a checkout) is not "
        "implemented: a Trigger that sets it is refused (Ready False, FieldNotImplemented)."))] = None
    # command and replicas act; command's form is checked at load, not here (as flow's): a narrower pattern would
    # refuse every write of a Trigger stored before (docs/crd-policy.md).
    flow: Annotated[str | None, Field(max_length=253, description=(
        "The repository's pi skill the job runs: .pi/skills/<flow>/SKILL.md at the default branch's tip (never "
        "a pull request's head or the job's own branch), invoked as the prompt with the event's text as its "
        "arguments (pi's /skill:<flow>). A job whose default branch lacks it, or on a fork's pull request, is "
        "refused before pi starts. A pi skill's name "
        "(lowercase letters, digits, single hyphens, 64 at most), checked when the Trigger loads."))] = None
    # Typed boolean: CEL cannot see a field without a type, so a non-boolean value is refused by the
    # apiserver's own type check ("spec.run.resume ... must be of type boolean").
    resume: Annotated[bool | None, Field(
        description="Continue the previous job's conversation on the same branch.")] = None
    command: Annotated[str | None, Field(max_length=4096, description=(
        "The job's whole prompt, '/<command> args': a command registered by a pi extension of the job image "
        "(its PI_COMMAND_EXTENSIONS_DIR, never the repository's), whose handler reads the event from the file "
        "PI_EVENT_FILE names. A job whose image declares no such directory, or whose extensions do not register "
        "the command, is refused before pi starts. Not with run.flow; refused with run.resume. Checked when the "
        "Trigger loads."))] = None
    replicas: Annotated[int | None, Field(ge=2, le=3, description=(
        "2 or 3 independent attempts per delivery: one Job each (<name>-r<i>), an issue's replica i on its own "
        "branch pi/issue-<n>-r<i> with its own pull request; each takes its own slot. With run.resume, or on a "
        "cron Trigger, it is refused."))] = None
    secrets: Annotated[list[Annotated[str, Field(max_length=253)]] | None, Field(max_length=32, description=(
        "Secrets of the Trigger's namespace, by name, delivered to every job of this Trigger: each is mounted "
        "read-only at /var/run/pi-dispatch/secrets/<name>/<key> (PI_RUN_SECRETS_DIR), a file per key, never "
        "an environment value. Never stored: the scan before the promotion redacts a value the job echoed. "
        "Refused with run.resume. The job Pod policy admits only the Secrets named in "
        "jobPodPolicy.credentialSecrets."))] = None
    model: Annotated[str, Field(max_length=128)] | None = None
    image: Annotated[str, Field(max_length=512)] | None = None
    piVersion: Annotated[str, Field(max_length=64)] | None = None
    auth: AuthSource | None = None
    forks: Annotated[bool | None, Field(description=(
        "Run jobs on pull requests from forks although their token cannot be narrowed (auth source pat or gh): "
        "the fork's code then runs with the deployment's token and its write access. Unset or false: such a job "
        "is refused (fork-not-allowed). With the GitHub App (auth source app) a fork's job always runs, with a "
        "token that is read-only on contents, and this field changes nothing."))] = None
    timeoutSeconds: Annotated[int | None, Field(ge=1, le=604800, description=(
        "The job's run timeout (its Pod's activeDeadlineSeconds): past it the job is stopped, ends Failed "
        "(DeadlineExceeded) and nothing is promoted. Unset: the deployment's job.timeoutSeconds."))] = None
    resources: Annotated[Resources | None, Field(description=(
        "The job container's resources. Unset: the deployment's job.resources."))] = None
    maxTokens: Annotated[int | None, Field(ge=1, le=10**12, description=(
        "The job's token budget behind the gateway: every reply's input, output and cache tokens as the model "
        "provider counted them, a resumed job's replayed conversation included. A request once the budget is "
        "used is refused; the job ends Failed (TokenBudget) and nothing is promoted. Unset: the deployment's "
        "gateway.defaultMaxTokens (none by default)."))] = None
    egress: Annotated[list[EgressHost] | None, Field(
        max_length=64, description=(
            "Hosts the job may reach through the gateway's HTTPS proxy, besides the deployment's "
            "gateway.egress.hosts (package registries, usually): host names, *.domain for its subdomains, an "
            "optional :port (443 otherwise). Every other host is refused and counted on the Job."))] = None
    credentials: Credentials = None
    nodeSelector: NodeSelector = None
    tolerations: Annotated[list[Toleration] | None, Field(
        max_length=16, description="Taints the job Pods tolerate (a node pool's, a GPU's), added to the "
                                   "deployment's job.tolerations.")] = None

    env: Annotated[list[EnvVar] | None, Field(max_length=32, description=(
        "Plain environment variables of the job container ({name, value}; never valueFrom: a Secret reaches a "
        "job by run.credentials or run.secrets). Not a name the operator or the job's contract sets (PI_*, "
        "PIDISPATCH_*, GH_*, GITHUB_*, GIT_*, LD_*, the proxy and CA variables, HOME, PATH, NODE_OPTIONS, ...): "
        "such a Trigger is refused (Ready False, InvalidSpec). The job Pod policy admits only the names listed "
        "in jobPodPolicy.triggerEnv."))] = None
    affinity: Annotated[Affinity | None, Field(description=(
        "The job Pod's affinity, merged with the deployment's job.affinity so that it only narrows: required node "
        "terms are combined with the deployment's (both must hold), every other term is added."))] = None
    priorityClassName: Annotated[str | None, Field(max_length=253, pattern=DNS_SUBDOMAIN, description=(
        "The job Pod's PriorityClass, instead of the deployment's job.priorityClassName; never a system-* one "
        "(refused: Ready False, InvalidSpec). The job Pod policy admits only those listed in "
        "jobPodPolicy.priorityClasses."))] = None
    volumes: Annotated[list[ConfigMapVolume] | None, Field(max_length=8, description=(
        "ConfigMaps of the Trigger's namespace mounted read-only into the job container, each under /mnt. Only "
        "ConfigMaps: never a Secret (that is run.secrets), a hostPath or any other volume."))] = None

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: list[EnvVar] | None) -> list[EnvVar] | None:
        seen: set[str] = set()
        for var in value or ():
            why = env_name_problem(var.name)
            if why is not None:
                raise ValueError(f"run.env: {why}")
            if var.name in seen:
                raise ValueError(f"run.env: {var.name} is named twice")
            seen.add(var.name)
        return value

    @field_validator("priorityClassName")
    @classmethod
    def _priority_class(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("system-"):
            raise ValueError(f"run.priorityClassName: {value} is a system priority class, reserved to the cluster's "
                             "own components")
        return value

    @field_validator("volumes")
    @classmethod
    def _volumes(cls, value: list[ConfigMapVolume] | None) -> list[ConfigMapVolume] | None:
        names: set[str] = set()
        paths: list[str] = []
        for volume in value or ():
            if volume.name in names:
                raise ValueError(f"run.volumes: {volume.name} is named twice")
            names.add(volume.name)
            path = mount_path(volume.name, volume.mountPath)
            why = mount_path_problem(path)
            if why is not None:
                raise ValueError(f"run.volumes[{volume.name}].mountPath: {why}")
            for other in paths:
                if path == other or path.startswith(other + "/") or other.startswith(path + "/"):
                    raise ValueError(f"run.volumes[{volume.name}].mountPath: {path} overlaps {other}")
            paths.append(path)
        return value

    @field_validator("affinity")
    @classmethod
    def _affinity(cls, value: Affinity | None) -> Affinity | None:
        why = affinity_problem(value.model_dump(exclude_none=True)) if value is not None else None
        if why is not None:
            raise ValueError(f"run.affinity: {why}")
        return value

    @field_validator("nodeSelector")
    @classmethod
    def _node_selector_keys(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        import re

        for key in value or {}:
            if len(key) > 316 or not re.fullmatch(LABEL_KEY, key):
                raise ValueError(f"run.nodeSelector: {key[:80]!r} is not a label key")
        return value

    @field_validator("credentials")
    @classmethod
    def _credential_names(cls, value: dict[str, SecretKey] | None) -> dict[str, SecretKey] | None:
        for name in value or {}:
            why = credential_name_problem(name)
            if why is not None:
                raise ValueError(why)
        return value


class TriggerSpec(ApiModel):
    """``spec`` of a Trigger. The load-time refusals (docs/store-contract.md#trigger-admission) are CEL rules on it."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": list(TRIGGER_RULES)})  # type: ignore[arg-type]

    on: TriggerOn
    run: TriggerRun


class Bounds(ApiModel):
    ttlDays: int | None = None
    maxBytes: int | None = None
    maxAgeDays: int | None = None
    maxResumeChain: int | None = None
    maxContextPct: Annotated[int | None, Field(json_schema_extra=NULLABLE)] = None


class CronStatus(ApiModel):
    """A cron Trigger's firing record (``jobflow/cron.py``): written, with the Trigger's resourceVersion, before
    the slot's Job is created, so that no slot fires twice across a restart or a change of leader."""

    lastSlot: Annotated[str | None, Field(json_schema_extra=DATE_TIME, description=(
        "The last slot (the instant of a minute of on.schedule, written in UTC) this Trigger fired, or claimed and "
        "is creating the Job of."))] = None
    lastJob: Annotated[str | None, Field(max_length=253, description=(
        "The Job created for lastSlot (unset while it is being created: the operator creates it again, by its "
        "deterministic name, after a restart)."))] = None
    missed: Annotated[int | None, Field(ge=0, json_schema_extra=INT64, description=(
        "Slots that came due while the operator was not running (or not leading) and were skipped: only the "
        "latest slot due is fired, once, the others are counted here, and so is a slot skipped because it was "
        "more than on.startingDeadlineSeconds late."))] = None
    lastSkipped: Annotated[str | None, Field(json_schema_extra=DATE_TIME, description=(
        "The latest slot skipped, not run, because the operator came to it more than on.startingDeadlineSeconds "
        "after it (counted in missed)."))] = None
    nextSlot: Annotated[str | None, Field(json_schema_extra=DATE_TIME, description=(
        "The next slot this Trigger fires at (UTC)."))] = None


class TriggerStatus(ApiModel):
    observedGeneration: Annotated[int | None, Field(json_schema_extra=INT64)] = None
    conditions: Conditions | None = None
    bounds: Bounds | None = None
    schedule: CronStatus | None = None


