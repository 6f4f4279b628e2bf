// An extension for the run.command tests whose /review handler throws: pi 0.73.1 prints
// "Extension error (command:review): ..." and still exits 0, so the runner must fail the job itself.
export default function (pi: any) {
  pi.registerCommand("review", {
    description: "A command whose handler fails (a test command).",
    handler: async () => {
      throw new Error("the review tool is not configured");
    },
  });
}
