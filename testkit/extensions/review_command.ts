// A pi extension for the runner's run.command tests (tests/runner/test_command_runner.py): it registers the command
// /review, whose handler reads the event file the runner names in PI_EVENT_FILE and sends the model one message
// built from its arguments and the event's comment (as quoted data). pi's print mode exits when a command's
// handler returns, so the handler waits for the end of the turn it started (agent_end) before it returns.
import { readFileSync, statSync } from "node:fs";
import { dirname } from "node:path";

export default function (pi: any) {
  let turnEnded: (() => void) | undefined;
  pi.on("agent_end", async () => {
    turnEnded?.();
  });
  pi.registerCommand("review", {
    description: "Review the pull request the event names (a test command).",
    handler: async (args: string) => {
      const path = process.env.PI_EVENT_FILE ?? "";
      const event = JSON.parse(readFileSync(path, "utf8"));
      const modes = `${(statSync(path).mode & 0o777).toString(8)}/${(statSync(dirname(path)).mode & 0o777).toString(8)}`;
      const ended = new Promise<void>((resolve) => {
        turnEnded = resolve;
      });
      pi.sendUserMessage(
        `REVIEW-COMMAND args=${JSON.stringify(args)} comment=${JSON.stringify(event.comment)} ` +
          `repository=${event.repository} fork=${event.fork} command=${event.command.name} ` +
          `eventFile=${path} modes=${modes}`,
      );
      await ended;
    },
  });
}
