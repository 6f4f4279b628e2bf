/**
 * pi-dispatch's handoff tool, loaded by the runner with `pi -e` for the pack turn only.
 *
 * One tool, `rethread_handoff`: the agent writes its letter to the next session and its ledger entry
 * in one call. The tool writes the arguments, as JSON, to the file the runner names in
 * PI_RETHREAD_HANDOFF_FILE (created exclusively: it never replaces or follows anything there) and ends
 * the turn. The runner validates the shape and the operator renders the Markdown: nothing here decides.
 */

import { writeFileSync, constants } from "node:fs";
import { Type } from "typebox";

const text = (description: string) => Type.String({ description });

export default function (pi: any) {
	pi.registerTool({
		name: "rethread_handoff",
		label: "Rethread handoff",
		description:
			"Write the handoff for the next session: a letter (where the work stands, what to do first, what to " +
			"watch out for, what not to redo, what is verified and what only assumed) and a ledger entry of the " +
			"durable facts. Call it exactly once, as your only action.",
		parameters: Type.Object({
			status: Type.Union([Type.Literal("landed"), Type.Literal("partial"), Type.Literal("blocked")], {
				description: "landed: the work is done and pushed; partial: some of it; blocked: it cannot go on",
			}),
			letter: Type.Object({
				whereWeAre: text("Where we are: the state of the work, in a few sentences"),
				doFirst: text("Do first: the first action of the next session"),
				watchOut: text("Watch out: the traps and risks"),
				dontRedo: text("Don't redo: what is settled and must not be repeated"),
				trust: text("Trust: what is verified and what is only assumed"),
			}),
			entry: Type.Object({
				verified: text("What is verified (tests run, commands seen to work)"),
				assumed: text("What is assumed and not checked"),
				stillBroken: text("What is still broken"),
				goal: text("Goal"),
				done: text("Done"),
				decisions: text("Decisions, each with its reason"),
				files: text("Files touched or that matter"),
				commands: text("Commands that matter (build, test, run)"),
				openProblems: text("Open problems"),
				nextSteps: text("Next steps"),
			}),
		}),
		async execute(_toolCallId: string, params: unknown) {
			const target = process.env.PI_RETHREAD_HANDOFF_FILE;
			if (!target) {
				return { content: [{ type: "text", text: "No handoff file is configured; nothing was written." }], details: {} };
			}
			const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
			writeFileSync(target, JSON.stringify(params), { flag: flags, mode: 0o600 });
			return { content: [{ type: "text", text: "Handoff written." }], details: {}, terminate: true };
		},
	});
}
