#!/bin/sh
# make java-dist: JAVA_DIR/dist/gpuipc-VERSION.jar, -sources.jar,
# -javadoc.jar and .pom (client/java/pom.xml), what a Maven repository holds.
# The pom's version must be VERSION; where Maven is installed, mvn -o
# validate must accept the pom (no plugin, no network).
#
#   client/java/dist.sh JAVA_DIR VERSION      after make java
set -eu
J=$1 VERSION=$2
JAR=${JAR:-jar}
POM=client/java/pom.xml
echo "  DIST    $J/dist"
v=$(sed -n '0,/<version>/s|.*<version>\(.*\)</version>.*|\1|p' $POM)
[ "$v" = "$VERSION" ] || { echo "java-dist: $POM has version $v, the Makefile $VERSION" >&2; exit 1; }
if command -v mvn >/dev/null 2>&1; then
        echo "  MVN     validate $POM"
        mvn -o -q -B -Dstyle.color=never -f $POM -Dmaven.repo.local="$(cd "$J" && pwd)/m2" validate
fi
rm -rf "$J/dist" "$J/javadoc"
mkdir -p "$J/dist"
cp "$J/gpuipc.jar" "$J/dist/gpuipc-$VERSION.jar"
cp $POM "$J/dist/gpuipc-$VERSION.pom"
"$JAR" --create --file "$J/dist/gpuipc-$VERSION-sources.jar" -C client/java/src/main/java .
javadoc -quiet -Xdoclint:all -Werror --release 17 -encoding UTF-8 -d "$J/javadoc" \
        -sourcepath client/java/src/main/java org.gpuipc
"$JAR" --create --file "$J/dist/gpuipc-$VERSION-javadoc.jar" -C "$J/javadoc" .
