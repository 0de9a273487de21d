# client/java/java.mk: the Java binding (docs/java.md: java, java-dist, check-java,
# check-java-jar, install-java); a JDK 17, and junit5 for the tests.
JAVAC ?= javac
JAR   ?= jar
JAVA  ?= java
export JAVA JAVAC JAR JUNIT_DIR
JDK_HOME ?= $(shell d=$$(readlink -f "$$(command -v $(JAVAC))" 2>/dev/null) && dirname "$$(dirname "$$d")")
JUNIT_CP = $(subst $() ,:,$(foreach j,junit-jupiter-api apiguardian-api opentest4j junit-platform-commons,\
           $(or $(JUNIT_DIR),/usr/share/java)/$(j).jar))
J := $(BUILDDIR)/java
JNI_EMBED := $(J)/native/org/gpuipc/native/linux-$(shell uname -m | sed 's/^x86_64$$/amd64/')/libgpuipc_jni.so
JAVA_SRC := $(wildcard client/java/src/main/java/org/gpuipc/*.java)
JNI_SRC := $(wildcard client/java/jni/*.c)
JAVAC_FLAGS := --release 17 -encoding UTF-8 -Werror
# Never sanitized: a JVM cannot load an ASan-instrumented library.
JNI_LINK = $(CC) -std=gnu11 -O2 -g -Wall -Wextra -Wshadow -Wno-unused-parameter -fPIC -fvisibility=hidden -shared \
           -Wl,-z,defs -I$(JDK_HOME)/include -I$(JDK_HOME)/include/linux $(filter-out $(SANFLAGS),$(LDFLAGS))

java: $(J)/gpuipc.jar $(J)/libgpuipc_jni.so
$(J)/gpuipc.jar $(J)/gpuipc-noarch.jar &: $(JAVA_SRC) $(JNI_EMBED)
	@$(if $(Q),echo "  JAVAC   org.gpuipc")
	$(Q)rm -rf $(J)/classes $(J)/*.jar && \
		$(JAVAC) $(JAVAC_FLAGS) -Xlint:all -Xdoclint:all/protected -d $(J)/classes $(JAVA_SRC) && \
		$(JAR) --create --file $(J)/gpuipc-noarch.jar -C $(J)/classes . && \
		$(JAR) --create --file $(J)/gpuipc.jar -C $(J)/classes . -C $(J)/native .
# The jar's copy links msgpack-c in and is stripped; the other links it dynamically.
$(J)/libgpuipc_jni.so: JNI_LIBS = $(MSGPACK_LIBS) -ldl
$(JNI_EMBED): JNI_LIBS = -Wl,-Bstatic $(shell $(PKG_CONFIG) --libs-only-l $(MSGPACK_PC) 2>/dev/null || \
                         echo -lmsgpackc) -Wl,-Bdynamic -ldl
$(JNI_EMBED): JNI_STRIP = strip --strip-unneeded $@.tmp &&
$(J)/libgpuipc_jni.so $(JNI_EMBED): $(JNI_SRC) client/java/jni/gpuipc_jni.h client/java/jni/gpuipc_jni.map \
                                    client/gpuipc.h $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(JNI_LINK) -Iclient -Wl,--version-script=client/java/jni/gpuipc_jni.map -o $@.tmp $(JNI_SRC) \
		$(LIBA) $(JNI_LIBS) && $(JNI_STRIP) mv $@.tmp $@
# Tests: try-with-resources over objects they do not otherwise touch is the point.
java-tests: java $(J)/test-classes.stamp
$(J)/test-classes.stamp: $(wildcard client/java/src/test/java/org/gpuipc/*.java tests/gpu/java/*.java) \
                         client/java/src/test/native/cuda_test_jni.c $(J)/gpuipc.jar
	@$(if $(Q),echo "  JAVAC   org.gpuipc tests")
	$(Q)mkdir -p $(J)/test && $(JNI_LINK) -o $(J)/test/libgpuipc_jni_test.so $(filter %.c,$^) -ldl
	$(Q)rm -rf $(J)/test-classes && $(JAVAC) $(JAVAC_FLAGS) -Xlint:all,-try -d $(J)/test-classes \
		-cp $(J)/classes:$(JUNIT_CP) $(filter %.java,$^) && touch $@

$(J)/dist/stamp: $(J)/gpuipc.jar $(JAVA_SRC) client/java/pom.xml
	$(Q)client/java/dist.sh $(J) $(VERSION) && touch $@
java-dist: $(J)/dist/stamp
install-java: $(J)/gpuipc.jar $(J)/libgpuipc_jni.so
	packaging/install.sh $(BUILDDIR) $(VERSION) $(MSGPACK_PC) java
ifneq ($(SANITIZE),1)
check-java: java-tests $(DAEMON) $(CTL) $(CUDA_DOUBLE)
	$(Q)tests/java/run.sh $(BUILDDIR)
check-java-jar: java $(J)/dist/stamp $(DAEMON)
	tests/java/jar-check.sh $(J) $(DAEMON)
endif
PLAIN_ONLY += check-java check-java-jar
.PHONY: java java-dist java-tests install-java check-java check-java-jar
