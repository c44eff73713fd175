// Renders chat templates with @huggingface/jinja as transformers.js's `apply_chat_template` does
// (src/base/tokenization_utils.js): `new Template(chat_template).render({messages, add_generation_prompt, tools,
// documents, ...special_tokens_map, ...kwargs})`, the library's own globals (raise_exception, range,
// strftime_now) and nothing else.
//
// stdin: one JSON document {prefix, template, clock: [Y, m, d, H, M, S], jobs: [{messages, tools,
// add_generation_prompt, variables}]}; `prefix` is the folder `npm install --prefix` installed the package into.
// stdout: one JSON line per job, in order, written as each job finishes: {"text": ...} or {"error": ..., "refused":
// bool}. A job that never finishes (the caller's timeout) leaves the lines before it intact.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");

function describe(err) {
	const name = err && err.name ? err.name : "Error";
	const text = String(err && err.message !== undefined ? err.message : err).trim().split("\n")[0];
	return text ? `${name}: ${text}` : name;
}

// A raise_exception call is the template's own refusal; any other error is a failure to render. The library's
// raise_exception throws a plain Error like its other runtime errors, so it is wrapped where the library declares it
// to mark what it throws; the message and the render's outcome stay the library's.
class TemplateRefusal extends Error {}

function markRefusals(Environment) {
	const declare = Environment.prototype.set;
	Environment.prototype.set = function (name, value) {
		if (name === "raise_exception" && typeof value === "function") {
			const raise = value;
			value = (...args) => {
				try {
					return raise(...args);
				} catch (err) {
					const refusal = new TemplateRefusal(err && err.message);
					refusal.name = err && err.name ? err.name : "Error";
					throw refusal;
				}
			};
		}
		return declare.call(this, name, value);
	};
}

// strftime_now reads `new Date()` in local time: pin it to the caller's wall clock.
function pinClock([year, month, day, hour, minute, second]) {
	const RealDate = Date;
	const pinned = new RealDate(year, month - 1, day, hour, minute, second).getTime();
	class PinnedDate extends RealDate {
		constructor(...args) {
			super(...(args.length ? args : [pinned]));
		}
		static now() {
			return pinned;
		}
	}
	globalThis.Date = PinnedDate;
}

function main() {
	const request = JSON.parse(fs.readFileSync(0, "utf8"));
	const requireFromPrefix = createRequire(path.join(request.prefix, "package.json"));
	const { Template, Environment } = requireFromPrefix("@huggingface/jinja");
	markRefusals(Environment);
	pinClock(request.clock);
	let template = null;
	let parseError = null;
	try {
		template = new Template(request.template);
	} catch (err) {
		parseError = describe(err);
	}
	for (const job of request.jobs) {
		let line;
		if (parseError !== null) {
			line = { error: parseError, refused: false };
		} else {
			try {
				const text = template.render({
					messages: job.messages,
					add_generation_prompt: job.add_generation_prompt,
					tools: job.tools,
					documents: null,
					...job.variables,
				});
				line = { text };
			} catch (err) {
				line = { error: describe(err), refused: err instanceof TemplateRefusal };
			}
		}
		fs.writeSync(1, JSON.stringify(line) + "\n");
	}
}

main();
