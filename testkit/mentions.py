"""The mention rule's cases, (id, comment text): where ``@pi`` is in visible prose (``A_MENTION``) and where
GitHub would not render it as a mention (``NOT_A_MENTION``). The receiver's matcher tests send them
through the receiver; the oracle test holds them against GitHub's own renderer (cmarkgfm).
"""

from __future__ import annotations

NOT_A_MENTION = [
    ("inside a longer word", "run `pip` first: @pip install -e ."),
    ("a longer login", "cc @pi-bot and @pi_fan"),
    ("an email address", "mail someone@pi.dev about it"),
    ("a host name", "see @pi.dev for the docs"),
    ("a team", "ping @pi/reviewers"),
    ("a fediverse handle", "follow @pi@mastodon.social"),
    ("a URL path", "https://example.social/@pi"),
    ("a Markdown quote", "> @pi please fix\n\nI disagree with that."),
    ("a quote's lazy continuation", "> quoting you:\n@pi please fix\n\nno."),
    ("a nested quote in a list", "- > @pi fix"),
    ("a code span", "type `@pi fix` to start a job"),
    ("a double-backtick code span", "type ``@pi ` fix`` to start a job"),
    ("a code span over two lines", "type `the\n@pi` phrase"),
    ("a fenced block", "Example:\n```\n@pi fix the build\n```"),
    ("a tilde fence", "~~~md\n@pi fix\n~~~"),
    ("a long fence holding a short one", "````\n```\n@pi\n```\n````"),
    ("an unclosed fence", "```\n@pi fix"),
    ("a fence in a list item", "1. run:\n   ```\n   @pi fix\n   ```"),
    ("an indented code block", "Example:\n\n    @pi fix the build"),
    ("an HTML comment", "Thanks! <!-- @pi -->"),
    ("an HTML comment over lines", "<!--\n\n@pi fix\n\n-->\nThanks!"),
    ("an unclosed HTML comment", "Thanks! <!-- @pi fix"),
    ("the rest of a line a comment begins (raw HTML)", "<!-- template --> @pi fix"),
    ("an HTML attribute", 'see <a title="@pi fix">here</a>'),
    ("an HTML declaration block", "<!DOCTYPE x\n\n@pi fix"),
    ("glued to a word by an escape", "x\\@pi fix"),
    ("a code span opened after an escaped backtick", "\\```@pi`` fix"),
    ("in other case", "hey @PI fix"),
]
A_MENTION = [
    ("at the start", "@pi please fix the build"),
    ("after a greeting", "Hi @pi, could you look?"),
    ("in parentheses", "(@pi) thoughts?"),
    ("at the end of a line", "Could you look at this\nplease @pi\nthanks"),
    ("at the end of a sentence", "I think this is for @pi."),
    ("with an ellipsis", "over to you @pi..."),
    ("after a code block", "```\nmake test\n```\n@pi fix the failing test"),
    ("after a quote and a blank line", "> the build is red\n\n@pi fix it"),
    ("after a comment line", "<!-- template: say what you want -->\n@pi fix"),
    ("after an inline HTML comment", "Thanks <!-- note --> @pi fix"),
    ("after an escaped backtick", "\\`@pi` is the phrase"),
    ("after an HTML tag", "<b>@pi</b> fix"),
    ("in bold", "**@pi** please"),
    ("in a list", "- [ ] @pi rebase"),
    ("after a colon", "owner:@pi"),
    ("CRLF line ends", "thanks\r\n\r\n@pi fix\r\n"),
    ("after an unmatched backtick", "the ` key: @pi fix"),
    ("an indented line continuing a paragraph", "please\n    @pi fix"),
]
