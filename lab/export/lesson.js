// A lesson's questions in the offline page (lab/export/lesson_page.py writes it after player.js).
// Before step N runs the page asks what it will do; "Lock in" grades the answer against the
// recorded run, as lab/lessons/rules.py's grade() does, and runs the step to reveal it. Answers
// stay in this browser (localStorage), so a reload keeps them.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  let answers = null; // question id -> {given, correct}
  const skipped = new Set(); // skipped at the step on screen: asked again on coming back, as in the lab
  let skippedAt = null;

  // ---- grading, as rules.py's Checkpoint.parse and grade ----
  function idOrder(id) {
    const m = /^r([0-9]{1,18})$/.exec(id);
    return m ? [Number(m[1]), ""] : [2 ** 62, id];
  }
  function sortIds(ids) {
    return [...new Set(ids)].sort((a, b) => {
      const [x, y] = [idOrder(a), idOrder(b)];
      return x[0] - y[0] || (x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0);
    });
  }
  function parse(q, raw) {
    if (q.kind === "ids") {
      const items = Array.isArray(raw) ? raw : String(raw).replaceAll(",", " ").split(/\s+/);
      const ids = sortIds(items.map((i) => String(i).trim()).filter(Boolean));
      const unknown = ids.filter((i) => q.options.length && !q.options.includes(i));
      if (unknown.length) throw new Error("unknown request id(s) " + unknown.join(", ") + "; pick from " + q.options.join(", "));
      return ids;
    }
    if (q.kind === "number") {
      const text = String(raw ?? "").trim();
      if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) throw new Error("the answer must be a number; got '" + (raw ?? "") + "'");
      return Number(text);
    }
    if (!q.options.includes(raw)) throw new Error("choose one of " + q.options.join(", "));
    return raw;
  }
  function correct(q, given) {
    if (q.kind === "number" && q.tolerance) return Math.abs(given - q.right) <= q.tolerance * Math.abs(q.right);
    if (q.kind === "ids") return given.length === q.right.length && given.every((id, i) => id === q.right[i]);
    return given === q.right;
  }
  const format = (answer) => (Array.isArray(answer) ? (answer.length ? answer.join(", ") : "none") : String(answer));

  // ---- the boxes ----
  function box(className, ...children) {
    const div = document.createElement("div");
    div.className = "p-box " + className;
    div.append(...children);
    return div;
  }
  function html(markup) { // the lesson's own text, rendered from Markdown by the exporter (its HTML escaped)
    const div = document.createElement("div");
    div.innerHTML = markup;
    return div;
  }
  function strong(text) {
    const b = document.createElement("strong");
    b.textContent = text;
    return b;
  }

  function input(q) {
    const field = document.createElement("div");
    field.className = "p-answer";
    if (q.kind === "ids" && q.options.length) {
      for (const id of q.options) {
        const label = document.createElement("label");
        const check = document.createElement("input");
        check.type = "checkbox";
        check.value = id;
        label.append(check, " " + id + " ");
        field.appendChild(label);
      }
      field.read = () => [...field.querySelectorAll("input:checked")].map((c) => c.value);
    } else if (q.kind === "choice") {
      for (const option of q.options) {
        const label = document.createElement("label");
        const radio = document.createElement("input");
        radio.type = "radio";
        radio.name = "p-choice-" + q.id;
        radio.value = option;
        label.append(radio, " " + option + " ");
        field.appendChild(label);
      }
      field.read = () => field.querySelector("input:checked")?.value ?? null;
    } else {
      const text = document.createElement("input");
      text.type = "text";
      text.setAttribute("aria-label", "Your prediction");
      text.placeholder = q.kind === "number" ? "a number" : "request ids, e.g. r1 r3";
      field.appendChild(text);
      field.read = () => text.value;
    }
    return field;
  }

  function ask(q, P) {
    const field = input(q);
    const error = document.createElement("p");
    error.className = "p-error";
    const lock = document.createElement("button");
    lock.className = "p-primary";
    lock.textContent = "Lock in and run the step";
    lock.addEventListener("click", () => {
      let given;
      try { given = parse(q, field.read()); } catch (e) { error.textContent = e.message; return; }
      answers[q.id] = { given, correct: correct(q, given) };
      P.save({ answers });
      onward(q, P);
    });
    const skip = document.createElement("button");
    skip.textContent = "Skip this question";
    skip.addEventListener("click", () => { skipped.add(q.id); skippedAt = P.cursor; onward(q, P); });
    return box("p-question", strong("Predict step " + q.at_step + " before it runs"), html(q.question), field, error, lock, skip);
  }

  function open(q) { return !answers[q.id] && !skipped.has(q.id); }

  function onward(q, P) { // the next question about the same step, or the step itself
    const more = P.data.lesson.questions.some((other) => other.at_step === q.at_step && open(other));
    P.seek(more ? P.cursor : q.at_step);
  }

  function reveal(q) {
    const a = answers[q.id];
    const verdict = strong("Step " + q.at_step + ": " + (a.correct ? "Right" : "Not quite") + ".");
    const said = document.createElement("p");
    said.append(verdict, " You said " + format(a.given) + "; the engine's answer: " + q.right_text + ".");
    return box(a.correct ? "p-right" : "p-wrong", said, html(q.question), html(q.explain));
  }

  function score(lesson) {
    const graded = lesson.questions.filter((q) => answers[q.id]);
    const right = graded.filter((q) => answers[q.id].correct).length;
    $("p-score").textContent = right + " / " + graded.length + " right · " + graded.length + " of " +
      lesson.questions.length + " questions answered";
  }

  document.addEventListener("player:step", (event) => {
    const P = window.labPlayer;
    const lesson = P.data.lesson;
    const i = event.detail;
    if (answers === null) answers = P.load().answers || {};
    const now = $("p-now");
    now.replaceChildren();
    for (const q of lesson.questions) if (q.at_step === i && answers[q.id]) now.appendChild(reveal(q));
    const next = i + 1; // the step Step would run (a record's step is its index)
    if (i !== skippedAt) { skipped.clear(); skippedAt = null; }
    const question = lesson.questions.find((q) => q.at_step === next && open(q));
    if (question) now.appendChild(ask(question, P));
    for (const text of lesson.watch[i + 1] || []) now.appendChild(box("p-watch", strong("Watch: "), html(text)));
    const later = lesson.questions.filter((q) => !answers[q.id] && q.at_step > next).map((q) => q.at_step);
    if (!question && later.length) {
      const p = document.createElement("p");
      p.textContent = "Next question: before step " + Math.min(...later) + ".";
      now.appendChild(p);
    }
    score(lesson);
  });
})();
