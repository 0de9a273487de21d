# client/java/java.mk: the Java binding (org.gpuipc), included by the top
# Makefile.  Needs a JDK 17 (javac, jar, java) and, for the tests, Debian's
# junit5 package:  apt-get install default-jdk-headless junit5
#
#   make java          build/java/gpuipc.jar, which carries the JNI library
#                      (org/gpuipc/native/linux-ARCH/libgpuipc_jni.so, loaded
#                      from there at first use), build/java/gpuipc-noarch.jar
#                      (classes only: for /usr/lib/TRIPLET/jni) and
#                      build/java/libgpuipc_jni.so
#   make java-dist     build/java/dist/: gpuipc-VERSION.jar, -sources.jar,
#                      -javadoc.jar and .pom (client/java/pom.xml), the
#                      artifacts a Maven repository holds
#   make check-java    the JUnit 5 suite against a real gpuipcd, then the jar
#                      alone: java -cp gpuipc.jar, no setting (part of check)
#
# The JNI library links libgpuipc.a statically (plus msgpack-c and libdl), so
# at run time it needs msgpack-c only (nothing with STATIC_DEPS=1).  The copy
# inside gpuipc.jar always links msgpack-c statically too, and is stripped:
# the jar needs nothing but glibc and a JVM.

JAVAC ?= javac
JAR   ?= jar
JAVA  ?= java
JDK_HOME   ?= $(shell d=$$(readlink -f "$$(command -v $(JAVAC))" 2>/dev/null) && dirname "$$(dirname "$$d")")
JNI_CPPFLAGS := -I$(JDK_HOME)/include -I$(JDK_HOME)/include/linux
JAVAC_FLAGS  := --release 17 -encoding UTF-8 -Xlint:all -Werror -Xdoclint:all/protected
# Tests: try-with-resources over objects they do not otherwise touch is the point.
JAVAC_TEST_FLAGS := --release 17 -encoding UTF-8 -Xlint:all,-try -Werror

JAVA_DIR     := $(BUILDDIR)/java
JAVA_JAR     := $(JAVA_DIR)/gpuipc.jar
JAVA_JAR_NOARCH := $(JAVA_DIR)/gpuipc-noarch.jar
JAVA_JNI     := $(JAVA_DIR)/libgpuipc_jni.so
# The folder in the jar: linux-<os.arch> as the JVM names the machine.
JAVA_ARCH    ?= $(shell uname -m | sed -e 's/^x86_64$$/amd64/')
JAVA_NATIVE  := $(JAVA_DIR)/native
JAVA_JNI_EMBED := $(JAVA_NATIVE)/org/gpuipc/native/linux-$(JAVA_ARCH)/libgpuipc_jni.so
JAVA_POM     := client/java/pom.xml
JAVA_DIST    := $(JAVA_DIR)/dist
JAVA_SRC     := $(wildcard client/java/src/main/java/org/gpuipc/*.java)
JAVA_TEST_SRC := $(wildcard client/java/src/test/java/org/gpuipc/*.java)
JAVA_TEST_JNI := $(JAVA_DIR)/test/libgpuipc_jni_test.so
JAVA_GPU_SRC := $(wildcard tests/gpu/java/*.java)

JUNIT_DIR     ?= /usr/share/java
JUNIT_CONSOLE := $(JUNIT_DIR)/junit-platform-console-standalone.jar
JUNIT_API_CP  := $(JUNIT_DIR)/junit-jupiter-api.jar:$(JUNIT_DIR)/apiguardian-api.jar:$(JUNIT_DIR)/opentest4j.jar:$(JUNIT_DIR)/junit-platform-commons.jar

# The JNI code: gnu11, warning-free, never sanitized (a JVM cannot load an
# ASan-instrumented library without preloading the runtime), PIC.
JNI_CFLAGS := -std=gnu11 -O2 -g -Wall -Wextra -Wshadow -Wno-unused-parameter -fPIC \
              -fvisibility=hidden

java: $(JAVA_JAR) $(JAVA_JAR_NOARCH) $(JAVA_JNI)

$(JAVA_DIR)/classes.stamp: $(JAVA_SRC)
	@mkdir -p $(JAVA_DIR)/classes
	@$(if $(Q),echo "  JAVAC   org.gpuipc")
	$(Q)rm -rf $(JAVA_DIR)/classes && mkdir -p $(JAVA_DIR)/classes && \
		$(JAVAC) $(JAVAC_FLAGS) -d $(JAVA_DIR)/classes $(JAVA_SRC)
	$(Q)touch $@

$(JAVA_JAR): $(JAVA_DIR)/classes.stamp $(JAVA_JNI_EMBED)
	@$(if $(Q),echo "  JAR     $@")
	$(Q)rm -f $@ && $(JAR) --create --file $@ -C $(JAVA_DIR)/classes . -C $(JAVA_NATIVE) .

$(JAVA_JAR_NOARCH): $(JAVA_DIR)/classes.stamp
	@$(if $(Q),echo "  JAR     $@")
	$(Q)rm -f $@ && $(JAR) --create --file $@ -C $(JAVA_DIR)/classes .

$(JAVA_JNI_EMBED): client/java/jni/gpuipc_jni.c client/java/jni/gpuipc_jni.map client/gpuipc.h $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(JNI_CFLAGS) -Iclient $(JNI_CPPFLAGS) $(filter-out $(SANFLAGS),$(LDFLAGS)) -shared -Wl,-z,defs \
		-Wl,--version-script=client/java/jni/gpuipc_jni.map -o $@.tmp $< \
		$(LIBA) -Wl,-Bstatic $(shell $(PKG_CONFIG) --libs-only-l $(MSGPACK_PC) 2>/dev/null || echo -lmsgpackc) \
		-Wl,-Bdynamic -ldl && strip --strip-unneeded $@.tmp && mv $@.tmp $@

# The Maven artifacts.  The pom's version must be VERSION; where Maven is
# installed, mvn -o validate must accept the pom (no plugin, no network).
$(JAVA_DIST)/stamp: $(JAVA_JAR) $(JAVA_SRC) $(JAVA_POM)
	@$(if $(Q),echo "  DIST    $(JAVA_DIST)")
	$(Q)v=$$(sed -n '0,/<version>/s|.*<version>\(.*\)</version>.*|\1|p' $(JAVA_POM)); \
		[ "$$v" = "$(VERSION)" ] || { echo "java-dist: $(JAVA_POM) has version $$v, the Makefile $(VERSION)" >&2; exit 1; }
	$(Q)if command -v mvn >/dev/null 2>&1; then \
		echo "  MVN     validate $(JAVA_POM)"; \
		mvn -o -q -B -Dstyle.color=never -f $(JAVA_POM) -Dmaven.repo.local=$(abspath $(JAVA_DIR))/m2 validate || exit 1; \
	fi
	$(Q)rm -rf $(JAVA_DIST) $(JAVA_DIR)/javadoc && mkdir -p $(JAVA_DIST) && \
		cp $(JAVA_JAR) $(JAVA_DIST)/gpuipc-$(VERSION).jar && \
		cp $(JAVA_POM) $(JAVA_DIST)/gpuipc-$(VERSION).pom && \
		$(JAR) --create --file $(JAVA_DIST)/gpuipc-$(VERSION)-sources.jar \
			-C client/java/src/main/java . && \
		javadoc -quiet -Xdoclint:all -Werror --release 17 -encoding UTF-8 \
			-d $(JAVA_DIR)/javadoc -sourcepath client/java/src/main/java org.gpuipc && \
		$(JAR) --create --file $(JAVA_DIST)/gpuipc-$(VERSION)-javadoc.jar -C $(JAVA_DIR)/javadoc .
	$(Q)touch $@

java-dist: $(JAVA_DIST)/stamp

$(JAVA_JNI): client/java/jni/gpuipc_jni.c client/java/jni/gpuipc_jni.map client/gpuipc.h $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(JNI_CFLAGS) -Iclient $(JNI_CPPFLAGS) $(filter-out $(SANFLAGS),$(LDFLAGS)) -shared -Wl,-z,defs \
		-Wl,--version-script=client/java/jni/gpuipc_jni.map -o $@ $< \
		$(LIBA) $(MSGPACK_LIBS) -ldl

$(JAVA_TEST_JNI): client/java/src/test/native/cuda_test_jni.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(JNI_CFLAGS) $(JNI_CPPFLAGS) -shared -Wl,-z,defs -o $@ $< -ldl

$(JAVA_DIR)/test-classes.stamp: $(JAVA_TEST_SRC) $(JAVA_GPU_SRC) $(JAVA_DIR)/classes.stamp
	@$(if $(Q),echo "  JAVAC   org.gpuipc tests")
	$(Q)rm -rf $(JAVA_DIR)/test-classes && mkdir -p $(JAVA_DIR)/test-classes && \
		$(JAVAC) $(JAVAC_TEST_FLAGS) -d $(JAVA_DIR)/test-classes \
		-cp $(JAVA_DIR)/classes:$(JUNIT_API_CP) $(JAVA_TEST_SRC) $(JAVA_GPU_SRC)
	$(Q)touch $@

# docs/java.md's code sample must compile against the current API.
$(JAVA_DIR)/doc-sample.stamp: docs/java.md $(JAVA_DIR)/classes.stamp
	@$(if $(Q),echo "  JAVAC   docs/java.md sample")
	$(Q)rm -rf $(JAVA_DIR)/doc-sample && mkdir -p $(JAVA_DIR)/doc-sample && \
		awk '/^```java$$/ {on = 1; next} /^```$$/ {on = 0} on' docs/java.md \
			> $(JAVA_DIR)/doc-sample/SparkHandoffExample.java && \
		$(JAVAC) $(JAVAC_TEST_FLAGS) -d $(JAVA_DIR)/doc-sample -cp $(JAVA_DIR)/classes \
			$(JAVA_DIR)/doc-sample/SparkHandoffExample.java
	$(Q)touch $@

java-tests: java $(JAVA_TEST_JNI) $(JAVA_DIR)/test-classes.stamp $(JAVA_DIR)/doc-sample.stamp

ifeq ($(SANITIZE),1)
# Under SANITIZE=1 libgpuipc.a is ASan-instrumented and cannot go into a JVM;
# the plain pass of `make check` has run the suite already.
check-java:
	@echo "== check-java: skipped under SANITIZE=1 (a JVM cannot load ASan-instrumented libgpuipc; the plain pass ran it)"
else
# -Xcheck:jni makes the JVM verify every JNI call; --fail-if-no-tests makes a
# run that found no tests fail.  Each run gets its own socket directory and
# CUDA-double shm directory.
check-java: java-tests $(DAEMON) $(CTL) $(CUDA_DOUBLE)
	@test -f $(JUNIT_CONSOLE) || { echo "check-java: $(JUNIT_CONSOLE) missing: apt-get install junit5" >&2; exit 1; }
	@echo "== check-java"
	$(Q)tmp=$$(mktemp -d /tmp/gpuipc-java.XXXXXX) && \
	GPUIPC_LIBCUDA=$(abspath $(CUDA_DOUBLE)) GPUIPC_CUDA_DOUBLE_SHM_DIR=$$tmp \
	GPUIPC_SOCKET=$$tmp/default.sock \
	$(JAVA) -Xcheck:jni -Dorg.gpuipc.library=$(abspath $(JAVA_JNI)) \
		-Dorg.gpuipc.test.native=$(abspath $(JAVA_TEST_JNI)) \
		-Dorg.gpuipc.test.builddir=$(abspath $(BUILDDIR)) \
		-Dorg.gpuipc.test.srcdir=$(CURDIR) \
		-Dorg.gpuipc.test.tmpdir=$$tmp \
		-jar $(JUNIT_CONSOLE) --disable-banner --disable-ansi-colors --fail-if-no-tests --details=tree \
		--reports-dir=$(JAVA_DIR)/test-reports \
		--class-path $(JAVA_JAR):$(JAVA_DIR)/test-classes \
		--scan-class-path $(JAVA_DIR)/test-classes > $$tmp/junit.out 2>&1; \
	rc=$$?; cat $$tmp/junit.out; \
	if [ $$rc -eq 0 ] && grep -q 'WARNING in native method' $$tmp/junit.out; then \
		echo "check-java: -Xcheck:jni reported JNI misuse" >&2; rc=1; fi; \
	rm -rf $$tmp; exit $$rc
endif

# make install-java: the classes-only jar as JAVADIR/gpuipc-VERSION.jar with
# gpuipc.jar linking to it, and the JNI library in JNIDIR, where the jar's
# loader looks (/usr/lib/TRIPLET/jni with PREFIX=/usr LIBDIR=/usr/lib/TRIPLET,
# as the Debian packages libgpuipc-java and libgpuipc-jni have them).
JAVADIR ?= $(PREFIX)/share/java
JNIDIR  ?= $(LIBDIR)/jni

install-java: $(JAVA_JAR_NOARCH) $(JAVA_JNI)
	install -v -d $(DESTDIR)$(JAVADIR) $(DESTDIR)$(JNIDIR)
	install -v -m 0644 $(JAVA_JAR_NOARCH) $(DESTDIR)$(JAVADIR)/gpuipc-$(VERSION).jar
	ln -sf gpuipc-$(VERSION).jar $(DESTDIR)$(JAVADIR)/gpuipc.jar
	install -v -m 0644 $(JAVA_JNI) $(DESTDIR)$(JNIDIR)/libgpuipc_jni.so

# The jar alone, as a user runs it (tests/java/jar-check.sh).
ifeq ($(SANITIZE),1)
check-java-jar:
	@echo "== check-java-jar: skipped under SANITIZE=1 (the plain pass ran it)"
else
check-java-jar: java $(DAEMON) $(JAVA_DIST)/stamp
	@echo "== tests/java/jar-check.sh $(JAVA_DIR)"
	$(Q)JAVA=$(JAVA) JAVAC=$(JAVAC) tests/java/jar-check.sh $(JAVA_DIR) $(DAEMON)
endif

CHECK_EXTRA += check-java check-java-jar

.PHONY: java java-dist java-tests install-java check-java check-java-jar
