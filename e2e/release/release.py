#!/usr/bin/env python3
"""Release artifacts that need more than shell (used by e2e/release/release):

  oci OUT.tar TAG ARCH=DOCKER_ARCHIVE...
                                   docker-archives (e2e/images build), one per architecture ->
                                   an OCI image layout tar whose image is an index of them (gzip
                                   layers); prints the index's digest. Deterministic: the same
                                   input gives the same bytes (fixed gzip/tar metadata).
  sbom PACKAGE IMAGE VERSION OUT   SPDX 2.3 JSON of the crates compiled into PACKAGE's binaries
                                   (cargo metadata, normal dependencies only) for IMAGE
  krew VERSION URI_BASE OUT ARCHIVE...
                                   krew plugin manifest for kubectl-sandbox: a platform per
                                   archive (kubectl-sandbox-linux-ARCH.tar.gz), with its sha256
  image-file LAYOUT.tar ARCH PATH OUT
                                   PATH of LAYOUT's ARCH image (its config checked) -> OUT
  sums DIR                         SHA256SUMS of every file under DIR (sorted, relative paths)
"""
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def image_manifest(archive: str, blobs: dict) -> bytes:
    """The OCI manifest of a docker-archive (e2e/images build), its blobs added to BLOBS."""
    with tarfile.open(archive) as t:
        (entry,) = json.load(t.extractfile("manifest.json"))
        config = t.extractfile(entry["Config"]).read()
        layers = [t.extractfile(l).read() for l in entry["Layers"]]
    layer_descs = []
    for layer in layers:
        gz = gzip.compress(layer, compresslevel=9, mtime=0)
        blobs[sha256(gz)] = gz
        layer_descs.append({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": "sha256:" + sha256(gz),
            "size": len(gz),
        })
    blobs[sha256(config)] = config
    manifest = canonical({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": "sha256:" + sha256(config),
            "size": len(config),
        },
        "layers": layer_descs,
    })
    blobs[sha256(manifest)] = manifest
    return manifest


def oci(out: str, tag: str, *platforms: str) -> None:
    """PLATFORMS: ARCH=DOCKER_ARCHIVE each. The layout's one image is an image index with a
    manifest per architecture (what `docker pull` / containerd pick from on each node)."""
    blobs = {}
    manifests = []
    for p in platforms:
        arch, archive = p.split("=", 1)
        m = image_manifest(archive, blobs)
        manifests.append({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": "sha256:" + sha256(m),
            "size": len(m),
            "platform": {"architecture": arch, "os": "linux"},
        })
    image_index = canonical({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    })
    blobs[sha256(image_index)] = image_index
    index = canonical({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": "sha256:" + sha256(image_index),
            "size": len(image_index),
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }],
    })
    tmp = out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as t:
        add(t, "oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
        add(t, "index.json", index)
        for digest in sorted(blobs):
            add(t, f"blobs/sha256/{digest}", blobs[digest])
    os.replace(tmp, out)
    print("sha256:" + sha256(image_index))


def image_file(layout: str, arch: str, path: str, out: str) -> None:
    """Copies PATH from the ARCH image of an OCI layout tar (oci above) to OUT, after checking
    that the image's config says ARCH: what a node of that architecture would run."""
    with tarfile.open(layout) as t:
        blob = lambda d: t.extractfile("blobs/sha256/" + d.removeprefix("sha256:")).read()
        (top,) = json.loads(t.extractfile("index.json").read())["manifests"]
        descs = [m for m in json.loads(blob(top["digest"]))["manifests"]
                 if m["platform"] == {"architecture": arch, "os": "linux"}]
        if len(descs) != 1:
            sys.exit(f"{layout}: {len(descs)} manifests for linux/{arch}")
        manifest = json.loads(blob(descs[0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        if config["architecture"] != arch:
            sys.exit(f"{layout}: the linux/{arch} image's config says {config['architecture']}")
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(layer["digest"])))) as lt:
                if path in lt.getnames():
                    with open(out, "wb") as f:
                        f.write(lt.extractfile(path).read())
                    os.chmod(out, 0o755)
                    return
    sys.exit(f"{layout}: no {path} in the linux/{arch} image")


def sbom(package: str, image: str, version: str, out: str) -> None:
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        check=True, capture_output=True).stdout)
    pkgs = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    # PACKAGE: one, or several joined by commas whose binaries share the image (the agent and
    # its supervisor); the first is the one the document describes.
    names = package.split(",")
    roots = [next(p["id"] for p in meta["packages"] if p["name"] == n) for n in names]
    root = roots[0]
    # Normal (not dev/build) dependencies reachable from the packages: what their binaries contain.
    seen, todo = set(), list(roots)
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        for d in nodes[i]["deps"]:
            if any(k["kind"] is None for k in d["dep_kinds"]):
                todo.append(d["pkg"])
    def spdx_id(p):
        return "SPDXRef-Package-" + "".join(c if c.isalnum() else "-" for c in f"{p['name']}-{p['version']}")
    packages, rels = [], []
    for i in sorted(seen, key=lambda i: (pkgs[i]["name"], pkgs[i]["version"])):
        p = pkgs[i]
        entry = {
            "SPDXID": spdx_id(p),
            "name": p["name"],
            "versionInfo": p["version"],
            "downloadLocation": "NOASSERTION",
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": p.get("license") or "NOASSERTION",
            "copyrightText": "NOASSERTION",
            "filesAnalyzed": False,
        }
        if (p.get("source") or "").startswith("registry+"):
            entry["externalRefs"] = [{
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": f"pkg:cargo/{p['name']}@{p['version']}",
            }]
        packages.append(entry)
        rels.append({"spdxElementId": "SPDXRef-DOCUMENT" if i == root else spdx_id(pkgs[root]),
                     "relationshipType": "DESCRIBES" if i == root else "CONTAINS",
                     "relatedSpdxElement": spdx_id(p)})
    doc = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"{image}:{version}",
        "documentNamespace": f"https://sandbox.dev/spdx/{image}-{version}",
        # Fixed, so the same tree gives the same SBOM.
        "creationInfo": {"created": "1970-01-01T00:00:00Z", "creators": ["Tool: e2e/release/release"]},
        "packages": packages,
        "relationships": rels,
    }
    with open(out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


def krew(version: str, uri_base: str, out: str, *archives: str) -> None:
    """ARCHIVES: kubectl-sandbox-linux-ARCH.tar.gz each, served at URI_BASE/<file name>."""
    platforms = ""
    for archive in archives:
        name = os.path.basename(archive)
        arch = name.removeprefix("kubectl-sandbox-linux-").removesuffix(".tar.gz")
        platforms += f"""  - selector:
      matchLabels:
        os: linux
        arch: {arch}
    uri: {uri_base}/{name}
    sha256: {sha256(open(archive, "rb").read())}
    bin: kubectl-sandbox
"""
    text = f"""apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: sandbox
spec:
  version: v{version}
  homepage: https://sandbox.dev
  shortDescription: Run and follow SandboxProcesses (processes in pods' containers)
  description: |
    kubectl sandbox runs a process inside a running pod's container as a SandboxProcess,
    follows its output with cursors, waits for it and signals it, through the
    sandbox-process-operator's API.
  platforms:
{platforms.rstrip()}
  caveats: |
    `kubectl sandbox <TAB>` completes through kubectl_complete-sandbox (kubectl 1.26+), which
    krew installs but does not put on PATH; link it next to the plugin once:
      ln -sf "${{KREW_ROOT:-$HOME/.krew}}/store/sandbox/v{version}/kubectl_complete-sandbox" "${{KREW_ROOT:-$HOME/.krew}}/bin/"
"""
    with open(out, "w") as f:
        f.write(text)


def sums(d: str) -> None:
    lines = []
    for base, _, files in os.walk(d):
        for name in files:
            p = os.path.join(base, name)
            rel = os.path.relpath(p, d)
            if rel == "SHA256SUMS":
                continue
            lines.append(f"{sha256(open(p, 'rb').read())}  {rel}")
    with open(os.path.join(d, "SHA256SUMS"), "w") as f:
        f.write("\n".join(sorted(lines, key=lambda l: l.split("  ", 1)[1])) + "\n")


if __name__ == "__main__":
    # the least number of arguments, and whether more may follow (one per architecture)
    cmds = {"oci": (oci, 3, True), "sbom": (sbom, 4, False), "krew": (krew, 4, True),
            "image-file": (image_file, 4, False), "sums": (sums, 1, False)}
    fn, n, more = cmds.get(sys.argv[1] if len(sys.argv) > 1 else "", (None, -1, False))
    got = len(sys.argv) - 2
    if fn is None or got < n or (got > n and not more):
        sys.exit(__doc__)
    fn(*sys.argv[2:])
