"""The local engine's Apache Kafka: jars resolved from Maven Central, run with Java 17+.

``org.apache.kafka:kafka_2.13`` and its runtime dependencies are copied from Maven Central
into the user cache once (``fetch_jars``); ``java_command`` finds a Java able to run them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from fairstream_dev.kafka.state import KAFKA_VERSION, SCALA_VERSION, BrokerError

# Kafka 4.x logs through slf4j 1.7 to log4j2; the 1.x binding keeps the broker log from going
# silent (a 2.x binding beside slf4j-api 1.7 drops every line).
LOG4J_VERSION = "2.24.3"
MIN_JAVA = 17

POM_TEMPLATE = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.fairstream</groupId>
  <artifactId>dev-kafka-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>{log4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""


def jars_dir(cache_dir: Path, kafka_version: str) -> Path:
    """Where the classpath of ``kafka_version`` goes under the cache directory."""
    return cache_dir / f"kafka_{SCALA_VERSION}-{kafka_version}" / "libs"


def jars_ready(libs: Path) -> bool:
    return (libs / ".complete").exists()


def fetch_jars(libs: Path, kafka_version: str, log: Callable[[str], None]) -> Path:
    """Resolve the broker's classpath from Maven Central into ``libs`` (once).

    Caller: ``DevBroker.fetch_jars`` (``up`` and ``fairstream-dev kafka fetch``).
    Affects: ``libs``; Maven's own local repository (~/.m2).
    """
    if jars_ready(libs):
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(
            "no `mvn` on PATH: the development broker resolves Apache Kafka from Maven "
            "Central with Maven. Install it (Debian/Ubuntu: `apt-get install maven`) or "
            "point fairstream at an existing broker with KAFKA_BOOTSTRAP_SERVERS."
        )
    libs.parent.mkdir(parents=True, exist_ok=True)
    log(
        f"resolving org.apache.kafka:kafka_{SCALA_VERSION}:{kafka_version} "
        f"and its runtime dependencies with Maven into {libs} ..."
    )
    with tempfile.TemporaryDirectory(dir=libs.parent) as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(
            POM_TEMPLATE.format(scala=SCALA_VERSION, kafka=kafka_version, log4j=LOG4J_VERSION)
        )
        staging = Path(tmp) / "libs"
        cmd = [
            mvn,
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not any(staging.glob("kafka_*.jar")):
            lines = (proc.stdout + proc.stderr).splitlines()[-30:]
            raise BrokerError(
                f"Maven could not resolve Apache Kafka {kafka_version} "
                f"(exit {proc.returncode}). Last lines of its output:\n" + "\n".join(lines)
            )
        (staging / ".complete").write_text(kafka_version + "\n")
        if libs.exists():
            shutil.rmtree(libs)
        staging.replace(libs)
    return libs


def java_command() -> str:
    """The java executable (``$JAVA_HOME/bin/java`` first), checked to be 17 or newer."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not candidate or not Path(candidate).exists():
        raise BrokerError(
            "no `java` found: the development broker needs a Java 17 or newer runtime. "
            "Install one (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`) or set "
            "JAVA_HOME; or point fairstream at an existing broker with KAFKA_BOOTSTRAP_SERVERS."
        )
    try:
        out = subprocess.run(
            [candidate, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as exc:
        raise BrokerError(f"cannot run {candidate}: {exc}") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match:
        major = int(match.group(1))
        if major == 1 and match.group(2):  # "1.8.0" style
            major = int(match.group(2))
        if major < MIN_JAVA:
            raise BrokerError(
                f"{candidate} is Java {major}; Apache Kafka {KAFKA_VERSION} needs Java "
                f"{MIN_JAVA} or newer (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`)."
            )
    return candidate
