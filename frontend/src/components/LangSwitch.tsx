// The language switch (English, 简体中文), in the shell's header and on the sign-in page.
import { Select } from "antd";
import { useI18n } from "../i18n";

export function LangSwitch() {
  const { lang, setLang, t } = useI18n();
  return (
    <Select
      aria-label={t("common.language")}
      data-testid="lang-switch"
      value={lang}
      onChange={setLang}
      style={{ width: 110 }}
      options={[
        { value: "en", label: "English" },
        { value: "zh", label: "简体中文" },
      ]}
    />
  );
}
