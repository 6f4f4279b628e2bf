// A second extension for the run.command tests: it registers /summarise only (not /review).
export default function (pi: any) {
  pi.registerCommand("summarise", {
    description: "A command the tests never run.",
    handler: async () => {},
  });
}
