// Validates Kubernetes objects against their kinds' JSON schemas
// (kubernetes-models, @kubernetes-models/keda): reads a JSON array of
// objects on stdin, prints one line per object, exits 1 if any is invalid.
//   node k8s_validate.mjs NODE_MODULES < objects.json
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

const modules = resolve(process.argv[2]);
const objects = JSON.parse(readFileSync(0, "utf8"));
let failed = 0;
for (const o of objects) {
  const name = `${o.kind}/${o.metadata?.name}`;
  const [group, version] = o.apiVersion.includes("/")
    ? o.apiVersion.split("/")
    : [null, o.apiVersion];
  const pkg = group === "keda.sh" ? "@kubernetes-models/keda" : "kubernetes-models";
  const path = [modules, pkg, group, version, "index.js"].filter(Boolean).join("/");
  try {
    const Kind = (await import(path))[o.kind];
    if (Kind === undefined) throw new Error(`no ${o.kind} in ${o.apiVersion}`);
    new Kind(o).validate();
    console.log(`ok      ${name}`);
  } catch (e) {
    console.log(`INVALID ${name}: ${e.message}`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);
