// The batch loop of the script transform, evaluated inside the QuickJS sandbox before the user's script.
//
// The host crosses into the sandbox once per batch: numbers and booleans travel as typed-array bytes, every
// other column as one JSON text of column arrays. Row objects are built and taken apart by functions generated
// for the schema at setup (fixed property names are much faster in QuickJS than dynamic ones), and the output
// values are coerced to the output column types here, so the host only assembles Arrow arrays.
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
  let current = -1;
  let columnsOut = [];
  let strictKeys = null;
  let load = null;
  let emit = null;
  let bind = null;

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

  // `row.name` when the name is an identifier (QuickJS reads it faster than `row["name"]`).
  function access(row, name) {
    return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(name) ? row + "." + name : row + "[" + key(name) + "]";
  }

  // Generated code: load(input) binds a batch's columns, build(i) makes row i (a variant without NULL checks
  // for batches whose numbers have no NULLs), bind(out) attaches the output buffers, emit(row, j) writes output
  // row j. Validity bytes start at 1, so only NULLs are written.
  function generate(inputs, outputs) {
    const lines = [];
    const vars = ["jin", "masked"];
    inputs.forEach(function (c, k) {
      vars.push("i" + k, "v" + k);
    });
    outputs.forEach(function (c, k) {
      vars.push("o" + k, "p" + k);
    });
    lines.push("let " + vars.join(", ") + ";");
    lines.push("function streamlingLoad(input) {");
    lines.push("  jin = input.json === '' ? [] : parse(input.json);");
    lines.push("  masked = false;");
    inputs.forEach(function (c, k) {
      if (c.kind === "num") {
        lines.push("  i" + k + " = float64(input.b" + k + ");");
        lines.push("  v" + k + " = input.m" + k + " === undefined ? null : input.m" + k + ";");
        lines.push("  if (v" + k + " !== null) masked = true;");
      } else if (c.kind === "bool") {
        lines.push("  i" + k + " = input.b" + k + ";");
      } else {
        lines.push("  i" + k + " = jin[" + c.slot + "];");
      }
    });
    lines.push("  return masked ? streamlingBuildMasked : streamlingBuild;");
    lines.push("}");
    [false, true].forEach(function (withMasks) {
      const props = inputs.map(function (c, k) {
        const v = "i" + k + "[i]";
        if (c.kind === "num") return key(c.name) + ": " + (withMasks ? "(v" + k + " === null || v" + k + "[i] === 1) ? " + v + " : null" : v);
        if (c.kind === "bool") return key(c.name) + ": " + v + " === 2 ? null : " + v + " === 1";
        return key(c.name) + ": " + v;
      });
      lines.push("function streamlingBuild" + (withMasks ? "Masked" : "") + "(i) {");
      lines.push("  return {" + props.join(", ") + "};");
      lines.push("}");
    });
    lines.push("function streamlingBind(out) {");
    outputs.forEach(function (c, k) {
      lines.push("  o" + k + " = out[" + k + "].values; p" + k + " = out[" + k + "].valid;");
    });
    lines.push("}");
    lines.push("function streamlingEmit(r, j, i) {");
    lines.push("  let x;");
    outputs.forEach(function (c, k) {
      const col = key(c.name);
      const o = "o" + k;
      lines.push("  x = " + access("r", c.name) + ";");
      if (c.kind === "num") {
        let fast = "typeof x === 'number'";
        if (c.type === "int64") fast += " && x % 1 === 0 && x >= " + RANGES.int64[0] + " && x <= " + RANGES.int64[1];
        else if (c.type !== "double" && c.type !== "float") {
          fast += " && (x | 0) === x && x >= " + RANGES[c.type][0] + " && x <= " + RANGES[c.type][1];
        }
        lines.push("  if (" + fast + ") " + o + "[j] = x;");
        lines.push("  else if (x == null) p" + k + "[j] = 0;");
        lines.push("  else " + o + "[j] = numberFrom(" + col + ", '" + c.type + "', x);");
      } else if (c.kind === "bool") {
        lines.push("  " + o + "[j] = x === true ? 1 : x === false ? 0 : x == null ? 2 : booleanFrom(" + col + ", x);");
      } else {
        const value =
          c.type === "any"
            ? "x === undefined ? null : jsonFrom(" + col + ", 'any', x)"
            : "typeof x === 'string' ? x : x == null ? null : jsonFrom(" + col + ", '" + c.type + "', x)";
        // An unchanged input value is only flagged: the host reuses the input's Arrow value (no JSON, no parsing).
        if (c.same >= 0) lines.push("  if (x === i" + c.same + "[i] || (x === undefined && i" + c.same + "[i] === null)) p" + k + "[j] = 1; else " + o + ".push(" + value + ");");
        else lines.push("  " + o + ".push(" + value + ");");
      }
    });
    lines.push("}");
    lines.push("return { load: streamlingLoad, bind: streamlingBind, emit: streamlingEmit };");
    const factory = new Function("parse", "float64", "numberFrom", "booleanFrom", "jsonFrom", lines.join("\n"));
    return factory(parse, float64, numberFrom, booleanFrom, jsonFrom);
  }

  function float64(bytes) {
    // A Float64Array view needs 8-byte alignment; copy only when the host's bytes are not aligned.
    if (bytes.byteOffset % 8 === 0) return new Float64Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 8);
    return new Float64Array(bytes.slice().buffer);
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

  // spec: {inputs: [{name, kind, slot}], outputs: [{name, kind, type}], strict: bool}
  define("__streamling_setup", function streamlingSetup(specText, userFunction) {
    if (typeof userFunction !== "function") {
      throw new TypeError("the script must be a single function expression, but it evaluates to " + aType(userFunction));
    }
    const spec = parse(specText);
    fn = userFunction;
    columnsOut = spec.outputs;
    strictKeys = null;
    if (spec.strict) {
      strictKeys = Object.create(null);
      spec.inputs.forEach(function (c) {
        strictKeys[c.name] = true;
      });
    }
    const code = generate(spec.inputs, spec.outputs);
    load = code.load;
    emit = code.emit;
    bind = code.bind;
    return true;
  });

  define("__streamling_current", function streamlingCurrent() {
    return current;
  });

  function unknownKeys(row) {
    const extra = [];
    for (const name in row) if (strictKeys[name] !== true) extra.push(name);
    return extra;
  }

  define("__streamling_batch", function streamlingBatch(input) {
    g.__streamling_in = null;
    const n = input.n;
    const build = load(input);
    let capacity = n > 16 ? n : 16;
    let out = allocate(capacity, null, 0);
    bind(out);
    let src = new Int32Array(capacity);
    let j = 0;
    let checked = strictKeys === null;
    for (let i = 0; i < n; i++) {
      current = i;
      let result;
      try {
        result = fn(build(i));
      } catch (e) {
        return thrown(i, e);
      }
      if (result === null || result === undefined) continue;
      if (typeof result !== "object") {
        return ["shape", i, "returned " + aType(result) + "; return an object, an array of objects, or null"];
      }
      if (result instanceof Promise) {
        return ["shape", i, "returned a Promise; the function must return its rows synchronously (no async)"];
      }
      const many = isArray(result);
      const count = many ? result.length : 1;
      for (let e = 0; e < count; e++) {
        const row = many ? result[e] : result;
        if (row === null || row === undefined) continue;
        if (typeof row !== "object" || isArray(row)) {
          return ["shape", i, "element " + e + " of the returned array is " + aType(row) + "; elements must be objects or null"];
        }
        if (!checked) {
          checked = true;
          const extra = unknownKeys(row);
          if (extra.length) return ["keys", i, extra];
        }
        if (j === capacity) {
          capacity *= 2;
          out = allocate(capacity, out, j);
          bind(out);
          const grown = new Int32Array(capacity);
          grown.set(src);
          src = grown;
        }
        try {
          emit(row, j, i);
        } catch (err) {
          return thrown(i, err);
        }
        src[j] = i;
        j++;
      }
    }
    current = -1;
    const json = [];
    const reply = ["ok", j, new Uint8Array(src.buffer, 0, j * 4), ""];
    columnsOut.forEach(function (c, k) {
      if (c.kind === "num") {
        reply.push(new Uint8Array(out[k].values.buffer, 0, j * 8), out[k].valid.subarray(0, j));
      } else if (c.kind === "bool") {
        reply.push(out[k].values.subarray(0, j));
      } else {
        if (c.same >= 0) reply.push(out[k].valid.subarray(0, j));
        json.push(out[k].values);
      }
    });
    try {
      reply[3] = stringify(json);
    } catch (e) {
      return ["error", -1, e && e.name ? e.name : "Error", "the output could not be serialized: " + (e && e.message), ""];
    }
    return reply;
  });

  function thrown(i, e) {
    current = -1;
    if (e !== null && typeof e === "object" && e[COERCE] === true) return ["coerce", i, e.column, e.value, e.reason];
    if (e instanceof Error && e.name === "InternalError" && e.message === "out of memory") return ["memory", i];
    if (e instanceof Error) return ["error", i, String(e.name), String(e.message), String(e.stack || "")];
    return ["error", i, "", "threw " + show(e) + " (not an Error, so no stack)", ""];
  }
})();
0;
