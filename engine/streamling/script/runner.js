// The batch loop of the script transform, evaluated inside the QuickJS sandbox before the user's script.
//
// The host crosses into the sandbox once per batch (`__streamling_batch`): numbers and booleans arrive in one byte
// buffer, every other column as one JSON text of column arrays, and the reply comes back the same way (`finish`).
// The loop itself is generated for the schema at setup (`generate`): fixed property names and local variables are
// much faster in QuickJS than dynamic ones. Output values are coerced to their column types here, so the host only
// assembles Arrow arrays, and values a script passes through unchanged are flagged rather than sent back.
(function () {
  "use strict";
  const g = globalThis;
  const parse = JSON.parse;
  const stringify = JSON.stringify;
  const isArray = Array.isArray;
  const trunc = Math.trunc;
  const isFiniteNumber = Number.isFinite;
  const COERCE = Symbol("coerce");

  let fn = null;
  let batch = null;
  let columnsOut = [];
  let strictKeys = null;
  const state = new Int32Array([-1]); // the row being processed

  const RANGES = {
    int8: [-128, 127],
    int16: [-32768, 32767],
    int32: [-2147483648, 2147483647],
    int64: [-9223372036854775808, 9223372036854774784], // the largest doubles inside the int64 range
  };

  function show(value) {
    let text;
    try {
      text = typeof value === "string" ? stringify(value) : typeof value === "bigint" ? value + "n" : stringify(value);
    } catch (e) {
      text = undefined;
    }
    if (text === undefined) text = String(value);
    return text.length > 120 ? text.slice(0, 117) + "..." : text;
  }

  function fail(column, value, reason) {
    const err = { column: column, value: show(value), reason: reason };
    err[COERCE] = true;
    throw err;
  }

  function typeName(value) {
    if (value === null) return "null";
    if (isArray(value)) return "array";
    if (value instanceof Date) return "Date";
    return typeof value;
  }

  function aType(value) {
    const name = typeName(value);
    return (/^[aeiou]/.test(name) ? "an " : "a ") + name;
  }

  function numberFrom(column, type, value) {
    let number;
    if (typeof value === "number") number = value;
    else if (typeof value === "string") {
      const text = value.trim();
      if (text === "NaN" || text === "Infinity" || text === "-Infinity" || text === "+Infinity") number = Number(text);
      else {
        number = text === "" ? NaN : Number(text);
        if (number !== number) fail(column, value, "is not a number");
      }
    } else if (typeof value === "bigint") number = Number(value);
    else fail(column, value, "(" + aType(value) + ") cannot be converted to " + type);
    if (type === "double" || type === "float") return number;
    if (!isFiniteNumber(number)) fail(column, value, "is not a finite number");
    number = trunc(number);
    const range = RANGES[type];
    if (number < range[0] || number > range[1]) fail(column, value, "is out of range for " + type);
    return number === 0 ? 0 : number; // no -0
  }

  function booleanFrom(column, value) {
    if (typeof value === "string") {
      const text = value.trim().toLowerCase();
      if (text === "true") return 1;
      if (text === "false") return 0;
    } else if (typeof value === "number") {
      if (value === 1) return 1;
      if (value === 0) return 0;
    }
    return fail(column, value, "(" + aType(value) + ") cannot be converted to boolean");
  }

  function isoOf(column, value) {
    if (value instanceof Date) {
      if (value.getTime() !== value.getTime()) fail(column, value, "is an invalid Date");
      return value.toISOString();
    }
    if (typeof value === "number") {
      const date = new Date(value);
      if (date.getTime() !== date.getTime()) fail(column, value, "is not a valid epoch-millisecond time");
      return date.toISOString();
    }
    return undefined;
  }

  function base64Of(bytes) {
    let text = "";
    for (let i = 0; i < bytes.length; i += 0x8000) {
      text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    }
    return btoa(text);
  }

  // JSON-carried output values: strings pass as they are (the host parses temporal and decimal text).
  function jsonFrom(column, type, value) {
    switch (type) {
      case "string":
        if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") return String(value);
        if (value instanceof Date) return isoOf(column, value);
        if (typeof value === "object") return stringify(value);
        return fail(column, value, "(" + aType(value) + ") cannot be converted to string");
      case "timestamp":
      case "timestamp_ntz": {
        const iso = isoOf(column, value);
        if (iso === undefined) fail(column, value, "(" + aType(value) + ") cannot be converted to " + type);
        return type === "timestamp_ntz" ? iso.slice(0, -1) : iso;
      }
      case "date": {
        const iso = isoOf(column, value);
        if (iso === undefined) fail(column, value, "(" + aType(value) + ") cannot be converted to date");
        return iso.slice(0, 10);
      }
      case "decimal":
        if (typeof value === "number") {
          if (!isFiniteNumber(value)) fail(column, value, "is not a finite number");
          return String(value);
        }
        if (typeof value === "bigint") return String(value);
        return fail(column, value, "(" + aType(value) + ") cannot be converted to decimal");
      case "binary":
        if (value instanceof Uint8Array) return base64Of(value);
        if (value instanceof ArrayBuffer) return base64Of(new Uint8Array(value));
        return fail(column, value, "(" + aType(value) + ") cannot be converted to binary (use a base64 string)");
      default:
        if (typeof value === "bigint") return String(value);
        return value;
    }
  }

  function key(name) {
    return stringify(name);
  }

  // A key in an object literal; `__proto__` as a plain key would set the prototype, a computed one is a property.
  function prop(name) {
    return name === "__proto__" ? "[" + key(name) + "]" : key(name);
  }

  // `row.name` when the name is an identifier (QuickJS reads it faster than `row["name"]`).
  function access(row, name) {
    return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(name) && name !== "__proto__" ? row + "." + name : row + "[" + key(name) + "]";
  }

  // The batch function is generated for the schema: one loop with the columns in local variables (QuickJS reads
  // locals faster than closure variables), the row built by an object literal with fixed keys (with and without
  // NULL checks on numbers), and each output value read by a fixed property name and coerced in place. Validity
  // bytes start at 1, so only NULLs are written.
  // The input columns as locals and the two object literals (dense, and with NULL checks) a row is built by;
  // shared by the batch function and the validation probe, so the probe's rows are exactly what a batch passes.
  function rowParts(inputs) {
    const decls = [];
    decls.push("  const n = input.n;");
    decls.push("  const jin = input.json === '' ? [] : parse(input.json);");
    decls.push("  const bin = aligned(input.bin), at = input.at;");
    const masks = [];
    inputs.forEach(function (c, k) {
      if (c.kind === "num") {
        decls.push("  const i" + k + " = new Float64Array(bin.buffer, bin.byteOffset + at[" + 2 * k + "], n);");
        decls.push("  const v" + k + " = at[" + (2 * k + 1) + "] < 0 ? null : bin.subarray(at[" + (2 * k + 1) + "], at[" + (2 * k + 1) + "] + n);");
        masks.push("v" + k + " !== null");
      } else if (c.kind === "bool") {
        decls.push("  const i" + k + " = bin.subarray(at[" + 2 * k + "], at[" + 2 * k + "] + n);");
      } else {
        decls.push("  const i" + k + " = jin[" + c.slot + "];");
      }
    });
    decls.push("  const masked = " + (masks.length ? masks.join(" || ") : "false") + ";");
    const dense = [];
    const withNulls = [];
    inputs.forEach(function (c, k) {
      const v = "i" + k + "[i]";
      if (c.kind === "num") {
        dense.push(prop(c.name) + ": " + v);
        withNulls.push(prop(c.name) + ": (v" + k + " === null || v" + k + "[i] === 1) ? " + v + " : null");
      } else if (c.kind === "bool") {
        dense.push(prop(c.name) + ": " + v + " === 2 ? null : " + v + " === 1");
        withNulls.push(dense[dense.length - 1]);
      } else {
        dense.push(prop(c.name) + ": " + v);
        withNulls.push(dense[dense.length - 1]);
      }
    });
    return { decls: decls, row: "masked ? {" + withNulls.join(", ") + "} : {" + dense.join(", ") + "}" };
  }

  function generate(inputs, outputs, strict) {
    const L = [];
    L.push("return function streamlingBatch(input, fn) {");
    const parts = rowParts(inputs);
    parts.decls.forEach(function (line) {
      L.push(line);
    });
    L.push("  let capacity = n > 16 ? n : 16;");
    L.push("  let out = allocate(capacity, null, 0);");
    const bind = outputs.map(function (c, k) {
      return "o" + k + " = out[" + k + "].values; p" + k + " = out[" + k + "].valid;";
    });
    L.push("  let " + outputs.map(function (c, k) { return "o" + k + ", p" + k; }).concat(["x", "r"]).join(", ") + ";");
    L.push("  " + bind.join(" "));
    L.push("  let src = new Int32Array(capacity);");
    L.push("  let j = 0, first = true, checked = " + (strict ? "false" : "true") + ";");
    // Locals for what the loop touches on every row (closure variables are slower to read in QuickJS).
    L.push("  const state = sharedState, isArray = arrayTest;");
    L.push("  for (let i = 0; i < n; i++) {");
    L.push("    state[0] = i;");
    L.push("    let result;");
    L.push("    try {");
    L.push("      result = fn(" + parts.row + ");");
    L.push("    } catch (e) {");
    L.push("      return thrown(i, e);");
    L.push("    }");
    L.push("    if (result === null || result === undefined) continue;");
    L.push("    if (typeof result !== 'object') return shape(i, result, -1);");
    L.push("    if (first) {");
    L.push("      first = false;");
    L.push("      if (result instanceof PromiseType) return shape(i, result, -1);");
    L.push("    }");
    // One block per output row, written twice: for a returned object, and inside the loop over a returned array.
    const block = [];
    block.push("if (!checked) {");
    block.push("  checked = true;");
    block.push("  const extra = unknownKeys(r);");
    block.push("  if (extra.length) return ['keys', i, extra];");
    block.push("}");
    block.push("if (j === capacity) {");
    block.push("  capacity *= 2;");
    block.push("  out = allocate(capacity, out, j);");
    block.push("  " + bind.join(" "));
    block.push("  const grown = new Int32Array(capacity);");
    block.push("  grown.set(src);");
    block.push("  src = grown;");
    block.push("}");
    block.push("try {");
    outputs.forEach(function (c, k) {
      const col = key(c.name);
      const o = "o" + k;
      block.push("  x = " + access("r", c.name) + ";");
      if (c.kind === "num") {
        // Integers that fit 32 bits take the fast path; larger ones, fractions and text go through numberFrom.
        let fast = "typeof x === 'number'";
        if (c.type === "int8" || c.type === "int16") {
          fast += " && (x | 0) === x && x >= " + RANGES[c.type][0] + " && x <= " + RANGES[c.type][1];
        } else if (c.type === "int32" || c.type === "int64") fast += " && (x | 0) === x";
        block.push("  if (" + fast + ") " + o + "[j] = x;");
        block.push("  else if (x == null) p" + k + "[j] = 0;");
        block.push("  else " + o + "[j] = numberFrom(" + col + ", '" + c.type + "', x);");
      } else if (c.kind === "bool") {
        block.push("  " + o + "[j] = x === true ? 1 : x === false ? 0 : x == null ? 2 : booleanFrom(" + col + ", x);");
      } else {
        const value =
          c.type === "any"
            ? "x === undefined ? null : jsonFrom(" + col + ", 'any', x)"
            : "typeof x === 'string' ? x : x == null ? null : jsonFrom(" + col + ", '" + c.type + "', x)";
        // An unchanged input value is only flagged: the host reuses the input's Arrow value (no JSON, no parsing).
        if (c.same >= 0) {
          const v = "i" + c.same + "[i]";
          block.push("  if (x === " + v + " || (x === undefined && " + v + " === null)) p" + k + "[j] = 1; else " + o + ".push(" + value + ");");
        } else block.push("  " + o + ".push(" + value + ");");
      }
    });
    block.push("} catch (err) {");
    block.push("  return thrown(i, err);");
    block.push("}");
    block.push("src[j] = i;");
    block.push("j++;");
    L.push("    if (!isArray(result)) {");
    L.push("      r = result;");
    block.forEach(function (line) {
      L.push("      " + line);
    });
    L.push("    } else {");
    L.push("      for (let e = 0; e < result.length; e++) {");
    L.push("        r = result[e];");
    L.push("        if (r === null || r === undefined) continue;");
    L.push("        if (typeof r !== 'object' || isArray(r)) return shape(i, r, e);");
    block.forEach(function (line) {
      L.push("        " + line);
    });
    L.push("      }");
    L.push("    }");
    L.push("  }");
    L.push("  state[0] = -1;");
    L.push("  return finish(out, src, j);");
    L.push("};");
    const names = ["parse", "aligned", "numberFrom", "booleanFrom", "jsonFrom", "allocate", "thrown", "shape", "unknownKeys",
      "finish", "arrayTest", "PromiseType", "sharedState"];
    const factory = new Function(names.join(", "), L.join("\n"));
    return factory(parse, aligned, numberFrom, booleanFrom, jsonFrom, allocate, thrown, shape, unknownKeys, finish, isArray,
      Promise, state);
  }

  // What a value would be to a column inference: `json` for objects and arrays, the JS type otherwise.
  function kindOf(value) {
    if (value === null) return "null";
    if (value === undefined) return "undefined";
    if (value instanceof Date) return "Date";
    if (value instanceof Uint8Array || value instanceof ArrayBuffer) return "binary";
    const type = typeof value;
    return type === "object" ? "json" : type;
  }

  function describe(row) {
    const keys = [];
    for (const name in row) keys.push([name, kindOf(row[name])]);
    return keys;
  }

  function failure(e) {
    if (e instanceof Error) return [String(e.name), String(e.message), String(e.stack || "")];
    return ["", "threw " + show(e) + " (not an Error, so no stack)", ""];
  }

  // The validation probe: each sample row through the user's function, each row's outcome described (its output
  // objects' keys with their kinds, or what went wrong) instead of coerced; returned as one JSON text.
  function generateProbe(inputs) {
    const L = [];
    L.push("return function streamlingProbe(input, fn) {");
    const parts = rowParts(inputs);
    parts.decls.forEach(function (line) {
      L.push(line);
    });
    L.push("  const rows = [];");
    L.push("  for (let i = 0; i < n; i++) {");
    L.push("    let result;");
    L.push("    try {");
    L.push("      result = fn(" + parts.row + ");");
    L.push("    } catch (e) {");
    L.push("      rows.push({error: failure(e)});");
    L.push("      continue;");
    L.push("    }");
    L.push("    rows.push(outcome(i, result));");
    L.push("  }");
    L.push("  return stringify(rows);");
    L.push("};");
    const names = ["parse", "aligned", "failure", "outcome", "stringify"];
    const factory = new Function(names.join(", "), L.join("\n"));
    return factory(parse, aligned, failure, outcome, stringify);
  }

  function outcome(i, result) {
    if (result === null || result === undefined) return { objects: [] };
    if (typeof result !== "object" || result instanceof Promise) return { shape: shape(i, result, -1)[2] };
    if (!isArray(result)) return { objects: [describe(result)] };
    const objects = [];
    for (let e = 0; e < result.length; e++) {
      const r = result[e];
      if (r === null || r === undefined) continue;
      if (typeof r !== "object" || isArray(r)) return { shape: shape(i, r, e)[2] };
      objects.push(describe(r));
    }
    return { objects: objects };
  }

  // Typed-array views need their element alignment: the host's bytes are copied only when they are not 8-aligned.
  function aligned(bytes) {
    return bytes.byteOffset % 8 === 0 ? bytes : bytes.slice();
  }

  function pad(size) {
    return (size + 7) & ~7;
  }

  function allocate(capacity, previous, used) {
    return columnsOut.map(function (c, k) {
      let values, valid;
      if (c.kind === "num") {
        values = new Float64Array(capacity);
        valid = new Uint8Array(capacity).fill(1);
        if (previous) {
          values.set(previous[k].values.subarray(0, used));
          valid.set(previous[k].valid.subarray(0, used));
        }
      } else if (c.kind === "bool") {
        values = new Uint8Array(capacity);
        if (previous) values.set(previous[k].values.subarray(0, used));
      } else {
        values = previous ? previous[k].values : [];
        if (c.same >= 0) {
          valid = new Uint8Array(capacity); // 1: the value is the input row's
          if (previous) valid.set(previous[k].valid.subarray(0, used));
        }
      }
      return { values: values, valid: valid };
    });
  }

  function define(name, value) {
    Object.defineProperty(g, name, { value: value, writable: false, configurable: false, enumerable: false });
  }

  // spec: {inputs: [{name, kind, slot}], outputs: [{name, kind, type, same}], strict: bool}
  define("__streamling_setup", function streamlingSetup(specText, userFunction) {
    if (typeof userFunction !== "function") {
      throw new TypeError("the script must be a single function expression, but it evaluates to " + aType(userFunction));
    }
    const spec = parse(specText);
    fn = userFunction;
    columnsOut = spec.outputs;
    strictKeys = Object.create(null);
    // Keys a row may have: the input's and the output columns (a column inferred at validation is not an input).
    spec.inputs.concat(spec.outputs).forEach(function (c) {
      strictKeys[c.name] = true;
    });
    batch = generate(spec.inputs, spec.outputs, spec.strict);
    return true;
  });

  // spec: {inputs: [{name, kind, slot}]}; input: one encoded batch of sample rows (see generateProbe).
  define("__streamling_probe", function streamlingProbe(specText, input) {
    const user = g.__streamling_user;
    if (typeof user !== "function") {
      throw new TypeError("the script must be a single function expression, but it evaluates to " + aType(user));
    }
    return generateProbe(parse(specText).inputs)(input, user);
  });

  // The row the batch was on (0-based), or -1: read by the host after a limit stopped the script.
  define("__streamling_current", function streamlingCurrent() {
    return state[0];
  });

  define("__streamling_batch", function streamlingRun(input) {
    g.__streamling_in = null;
    return batch(input, fn);
  });

  function unknownKeys(row) {
    const extra = [];
    for (const name in row) if (strictKeys[name] !== true) extra.push(name);
    return extra;
  }

  function shape(i, value, element) {
    state[0] = -1;
    if (element >= 0) {
      return ["shape", i, "element " + element + " of the returned array is " + aType(value) + "; elements must be objects or null"];
    }
    if (value instanceof Promise) {
      return ["shape", i, "returned a Promise; the function must return its rows synchronously (no async)"];
    }
    return ["shape", i, "returned " + aType(value) + "; return an object, an array of objects, or null"];
  }

  // The reply: ["ok", rows, bytes, json]. The bytes hold, each padded to 8: the source row of every output row
  // (int32), then per output column, numbers as float64 values and validity bytes, booleans as one byte each
  // (2: NULL), JSON-carried columns that may reuse input values as one "unchanged" byte each. The JSON text holds
  // the other values of the JSON-carried columns. One buffer keeps the host's crossings (each a wasm call) few.
  function finish(out, src, j) {
    let size = pad(4 * j);
    columnsOut.forEach(function (c) {
      if (c.kind === "num") size += 8 * j + pad(j);
      else if (c.kind === "bool" || c.same >= 0) size += pad(j);
    });
    const bytes = new Uint8Array(size);
    bytes.set(new Uint8Array(src.buffer, 0, 4 * j), 0);
    let offset = pad(4 * j);
    const json = [];
    columnsOut.forEach(function (c, k) {
      if (c.kind === "num") {
        bytes.set(new Uint8Array(out[k].values.buffer, 0, 8 * j), offset);
        bytes.set(out[k].valid.subarray(0, j), offset + 8 * j);
        offset += 8 * j + pad(j);
      } else if (c.kind === "bool") {
        bytes.set(out[k].values.subarray(0, j), offset);
        offset += pad(j);
      } else {
        if (c.same >= 0) {
          bytes.set(out[k].valid.subarray(0, j), offset);
          offset += pad(j);
        }
        json.push(out[k].values);
      }
    });
    let text;
    try {
      text = stringify(json);
    } catch (e) {
      return ["error", -1, e && e.name ? e.name : "Error", "the output could not be serialized: " + (e && e.message), ""];
    }
    return ["ok", j, bytes, text];
  }

  function thrown(i, e) {
    state[0] = -1;
    if (e !== null && typeof e === "object" && e[COERCE] === true) return ["coerce", i, e.column, e.value, e.reason];
    if (e instanceof Error && e.name === "InternalError" && e.message === "out of memory") return ["memory", i];
    if (e instanceof Error) return ["error", i, String(e.name), String(e.message), String(e.stack || "")];
    return ["error", i, "", "threw " + show(e) + " (not an Error, so no stack)", ""];
  }
})();
0;
